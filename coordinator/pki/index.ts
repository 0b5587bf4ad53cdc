// The pki area's entry point: what other areas may use of it.
export { ClusterPki } from "./cluster-pki.ts";
