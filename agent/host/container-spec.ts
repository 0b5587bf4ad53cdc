// Turns a resolved request plus what the image store, the network and GPU
// injection produced into the runtime's ContainerSpec.

import { invalid } from "../../shared/errors.ts";
import { gangRankAddress } from "../../shared/gang.ts";
import type { GpuInjection } from "../capacity/index.ts";
import type { ImageInfo } from "../images/index.ts";
import type { ContainerNetwork } from "../network/index.ts";
import type { BindMount, ContainerSpec, NetnsAddresses } from "../runtime/index.ts";
import { imageUser, mergeEnv, type ResolvedRunRequest } from "./request.ts";

// Options the runtime always sets on bind mounts, or that only say "bind".
const IMPLIED_MOUNT_OPTIONS = new Set(["bind", "rbind", "ro", "rw", "nosuid", "nodev"]);

export interface SpecInputs {
  req: ResolvedRunRequest;
  image: Pick<ImageInfo, "layers" | "config" | "ref">;
  /** Request mounts with their sources resolved (realpath) and checked. */
  mounts: BindMount[];
  net?: Pick<
    ContainerNetwork,
    "netnsPath" | "resolvConfPath" | "ipv4" | "prefix4" | "gateway4" | "ipv6" | "prefix6" | "gateway6"
  >;
  hostsFile?: string;
  gpu?: GpuInjection;
  /**
   * The code's overlay layer (its tree at mnt/code), uppermost of the root's
   * lower dirs: /mnt/code is the container's to write, through its own upper
   * dir, while the shared tree stays as it is.
   */
  codeLayer?: string;
}

/** The program to run: the request's args, else the image's entrypoint + cmd. */
export function containerArgs(req: ResolvedRunRequest, image: SpecInputs["image"]): string[] {
  if (req.args.length > 0) return req.args;
  const args = [...image.config.entrypoint, ...image.config.cmd];
  if (args.length === 0) {
    throw invalid(`args are empty and image ${image.ref} has no entrypoint or cmd: nothing to run`, {
      field: "args",
    });
  }
  return args;
}

/**
 * Whether the container runs in a user namespace: root inside an
 * unprivileged host range, unless its workspace opted out (docs/runtime.md);
 * gVisor's sandbox is a kernel of its own either way.
 */
export const usesUserNamespace = (req: Pick<ResolvedRunRequest, "isolation" | "userNamespace">): boolean =>
  req.isolation !== "gvisor" && req.userNamespace !== false;

export function buildContainerSpec(i: SpecInputs): ContainerSpec {
  const { req, image } = i;
  const mounts: BindMount[] = [...i.mounts];
  if (i.net) mounts.push({ source: i.net.resolvConfPath, destination: "/etc/resolv.conf", readonly: true });
  if (i.hostsFile) mounts.push({ source: i.hostsFile, destination: "/etc/hosts", readonly: true });
  for (const m of i.gpu?.mounts ?? []) {
    mounts.push({
      source: m.source,
      destination: m.destination,
      readonly: m.options.includes("ro"),
      options: m.options.filter((o) => !IMPLIED_MOUNT_OPTIONS.has(o)),
    });
  }
  const spec: ContainerSpec = {
    id: req.id,
    image: { rootfs: i.codeLayer ? [i.codeLayer, ...image.layers] : image.layers },
    args: containerArgs(req, image),
    env: { ...mergeEnv(image.config.env, req.env), ...(i.gpu?.env ?? {}) },
    cwd: req.cwd ?? (image.config.workingDir || "/"),
    user: req.user ?? imageUser(image.config.user) ?? { uid: 0, gid: 0 },
    cpu: req.cpu,
    memoryBytes: req.memoryBytes,
    mounts,
    labels: req.labels,
  };
  if (req.hostname) spec.hostname = req.hostname;
  if (req.pidsLimit !== undefined) spec.pidsLimit = req.pidsLimit;
  if (req.timeoutMs !== undefined) spec.timeoutMs = req.timeoutMs;
  if (req.startupWindowMs !== undefined) spec.startupWindowMs = req.startupWindowMs;
  if (i.net) {
    spec.netnsPath = i.net.netnsPath;
    // What a user namespace's network hook would otherwise read first (oci-spec.ts).
    spec.netnsAddresses = netnsAddressesOf(i.net);
    // A user namespace's hook moves a gang member's GANG_IFACE in too, and gives it this again.
    if (req.gang) spec.netnsAddresses.gang4 = `${gangRankAddress(req.gang.subnet, req.gang.rank)}/24`;
  }
  // gVisor is runsc; "container" leaves the agent's own runtime (runc or crun).
  if (req.isolation === "gvisor") spec.runtime = "runsc";
  if (usesUserNamespace(req)) spec.userNamespace = true;
  // The older deny-list profile only for a workspace opted out; absent is the allow list.
  if (req.syscallFilter === "denylist") spec.seccomp = "denylist";
  if (i.gpu) {
    spec.extraDevices = i.gpu.devices.map((d) => ({ ...d }));
    spec.extraDeviceRules = i.gpu.deviceCgroupRules.map((r) => ({ ...r }));
    // The toolkit's CDI hooks (or the agent's own): without them the driver libraries may not load.
    const hooks = Object.entries(i.gpu.hooks).filter(([, list]) => (list?.length ?? 0) > 0);
    if (hooks.length > 0) {
      spec.hooks = Object.fromEntries(hooks.map(([phase, list]) => [phase, list!.map((h) => ({ ...h }))]));
    }
  }
  return spec;
}

/** /etc/hosts for a container: loopback names and its own addresses under its hostname. */
export function hostsFileText(hostname: string, ipv4?: string, ipv6?: string): string {
  const lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"];
  if (ipv4) lines.push(`${ipv4}\t${hostname}`);
  if (ipv6) lines.push(`${ipv6}\t${hostname}`);
  return `${lines.join("\n")}\n`;
}

/** The hostname the runtime gives a container when the request names none. */
export function defaultHostname(id: string): string {
  return id.slice(0, 63).replace(/[^A-Za-z0-9-]/g, "-");
}

/** eth0's addresses and gateways in a container's network namespace, as the runtime's spec takes them. */
function netnsAddressesOf(n: NonNullable<SpecInputs["net"]>): NetnsAddresses {
  return {
    ...(n.ipv4 ? { ipv4: `${n.ipv4}/${n.prefix4}` } : {}),
    ...(n.ipv6 ? { ipv6: `${n.ipv6}/${n.prefix6}` } : {}),
    ...(n.gateway4 ? { gateway4: n.gateway4 } : {}),
    ...(n.gateway6 ? { gateway6: n.gateway6 } : {}),
  };
}
