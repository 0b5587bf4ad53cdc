// Gangs (docs/gpus.md, "Gang jobs across hosts"): one task run by N
// containers on N hosts at once, which reach each other, and only each
// other, over a private VXLAN network of their own. What the coordinator,
// the agent and the runner inside the container agree on.

/** Most hosts one gang spans. */
export const MAX_GANG_NODES = 64;

/** The gang's interface inside each member container. */
export const GANG_IFACE = "gang0";

/** The private network every gang uses (each gang is its own L2 segment, so they may share it): rank r is .(r+1). */
export const DEFAULT_GANG_SUBNET = "10.251.0.0/24";

/** torch.distributed's rendezvous port on rank 0 (MASTER_PORT). */
export const GANG_MASTER_PORT = 29500;

/** The port rank 0's runner hands each task to the other ranks on. */
export const GANG_CONTROL_PORT = 29400;

/** UDP port of the gangs' VXLAN traffic between hosts (IANA's VXLAN port). */
export const GANG_VXLAN_PORT = 4789;

/** Labels on every gang member container, beside RunnerLabels. */
export const GangLabels = {
  gangId: "berth.gang_id",
  rank: "berth.gang_rank",
  size: "berth.gang_size",
} as const;

/** rank's address in the gang subnet ("10.251.0.0/24", 1 → "10.251.0.2"). */
export function gangRankAddress(subnet: string, rank: number): string {
  const base = subnet.split("/")[0] ?? "";
  const parts = base.split(".").map(Number);
  const last = (parts[3] ?? 0) + rank + 1;
  return [...parts.slice(0, 3), last].join(".");
}

/**
 * The environment each member gets (torch.distributed's env:// rendezvous
 * and NCCL's and gloo's interface choice among them).
 */
export function gangEnv(m: {
  id: string;
  rank: number;
  size: number;
  subnet: string;
  masterPort: number;
}): Record<string, string> {
  const addrs = Array.from({ length: m.size }, (_, r) => gangRankAddress(m.subnet, r));
  return {
    BERTH_GANG_ID: m.id,
    BERTH_GANG_RANK: String(m.rank),
    BERTH_GANG_SIZE: String(m.size),
    BERTH_GANG_ADDRS: addrs.join(","),
    BERTH_GANG_CONTROL_PORT: String(GANG_CONTROL_PORT),
    RANK: String(m.rank),
    NODE_RANK: String(m.rank),
    WORLD_SIZE: String(m.size),
    LOCAL_RANK: "0",
    LOCAL_WORLD_SIZE: "1",
    MASTER_ADDR: addrs[0] ?? "",
    MASTER_PORT: String(m.masterPort),
    GLOO_SOCKET_IFNAME: GANG_IFACE,
    NCCL_SOCKET_IFNAME: GANG_IFACE,
  };
}
