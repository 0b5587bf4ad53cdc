// The tiny bigram model app of the /v1 and bot end-to-end tests
// (test/fixtures/inference/bigram_app.py) and its training text: a few
// license files, read as they are on this machine, so no weights are
// downloaded.

import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const BIGRAM_APP = fileURLToPath(new URL("../fixtures/inference/bigram_app.py", import.meta.url));
const LICENSES = "/usr/share/common-licenses";

/** Writes the app as `dir/app.py` and its corpus into `dir/corpus`. */
export function writeBigramApp(dir: string): void {
  copyFileSync(BIGRAM_APP, join(dir, "app.py"));
  mkdirSync(join(dir, "corpus"));
  const files = readdirSync(LICENSES).filter((f) => statSync(join(LICENSES, f)).isFile());
  assert.ok(files.length > 0, `no license texts in ${LICENSES}`);
  for (const f of files.slice(0, 6)) writeFileSync(join(dir, "corpus", f), readFileSync(join(LICENSES, f)));
}

/** The JSON body of a response that must be 2xx (the status and body name a failure). */
export async function okJson<T>(r: Response): Promise<T> {
  const text = await r.text();
  assert.ok(r.ok, `${r.status}: ${text}`);
  return JSON.parse(text) as T;
}
