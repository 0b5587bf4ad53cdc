// Entry point of the agent's network subsystem.
export {
  Network,
  type ContainerNetwork,
  type NetworkLogger,
  type RecoverReport,
  type ReservedNetwork,
} from "./network.ts";
export { type NetworkOptions, type ResolvedNetworkOptions, resolveNetworkOptions } from "./options.ts";
export { Ipam, type Lease } from "./ipam.ts";
export { NamespacePool, type NamespacePoolOptions, type PooledNamespace } from "./pool.ts";
export { cleanupNetworkByPrefix } from "./cleanup.ts";
export { containerResolvConf } from "./resolv.ts";
export { Subnet } from "./subnet.ts";
export { listNftTables } from "./nft.ts";
export { readSysctlRecord } from "./sysctl-record.ts";
