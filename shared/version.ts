/** berth's version, reported by every process. Kept in step with package.json. */
export const BERTH_VERSION = "0.1.0";
