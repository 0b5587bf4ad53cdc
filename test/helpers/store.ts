// A SecretStore in memory, for the cluster PKI in tests.

import type { SecretStore } from "../../coordinator/pki/cluster-pki.ts";

export function memoryStore(): SecretStore {
  const m = new Map<string, string>();
  return { get: async (k) => m.get(k), put: async (k, v) => void m.set(k, v) };
}
