// `berth agent run|ps|exec|logs|stop|pull|images|rmi|import|gc|policy`: the local
// agent's container API at the edge, over its root-only unix socket.

import type { Command } from "commander";
import type { ContainerApi } from "../../api/index.ts";
import { collect, keyValues, parseNonNegativeInt, parseSecondsMs, resolveAgentSocket } from "../edge/args.ts";
import { gcLines, importRequestFromFlags, parseUnusedHours } from "../edge/images.ts";
import { type EdgeIo, processIo } from "../edge/io.ts";
import { type RunFlags, buildRunRequest, egressFromFlags, runAttached } from "../edge/run.ts";
import { IMAGE_COLUMNS, PS_COLUMNS, execAttached, imageRow, printLogs, psRow } from "../edge/show.ts";
import { profileAgentSocket } from "../config.ts";
import { printJson, printTable } from "../output.ts";
import { BerthError } from "../../shared/errors.ts";
import type { EgressPolicy } from "../../shared/egress.ts";

const SOCKET_HELP =
  "the agent's unix socket (default: $BERTH_AGENT_SOCKET, else the agent of `berth up` (saved in the CLI " +
  "profile), else /var/lib/berth-agent/agent.sock)";

function describePolicy(p: EgressPolicy): string {
  if (p.mode === "allow") return `allow ${p.cidrs.join(", ")}`;
  return p.mode === "block" ? "network blocked" : "network open";
}

/**
 * Registers the edge subcommands on `agent` (the `berth agent` command, whose
 * `--data-dir` also locates the socket). `io` is the outside world; tests
 * pass their own.
 */
export function agentEdgeCommands(agent: Command, io: EdgeIo = processIo()): void {
  // Each command resolves its socket from its own --socket and agent's --data-dir (only when given).
  const withClient = async <T>(cmd: Command, fn: (api: ContainerApi) => Promise<T>): Promise<T> => {
    const explicitDataDir = agent.getOptionValueSource("dataDir") === "cli";
    const socket = resolveAgentSocket({
      socket: cmd.opts<{ socket?: string }>().socket,
      ...(explicitDataDir ? { dataDir: agent.opts<{ dataDir: string }>().dataDir } : {}),
      env: io.env,
      upSocket: profileAgentSocket(io.env),
    });
    const client = await io.connect(socket);
    try {
      return await fn(client);
    } finally {
      client.close();
    }
  };
  // output.ts takes process.stdout's type; any writable does.
  const out = io.stdout as typeof process.stdout;

  agent
    .command("run")
    .description(
      "run a container on this host's agent; attached (logs, then its exit code) unless --detach\n" +
        "put the command after `--` when it has options: berth agent run python:3.12 -- python -c 'print(1)'",
    )
    .argument("<image>", "image reference")
    .argument("[command...]", "command and arguments (the image's default when omitted)")
    .option(
      "--memory <size>",
      "memory limit: 64Mi, 2Gi (powers of 1024), 512M (powers of 1000); a plain number is MiB",
      "128Mi",
    )
    .option("--cpu <cores>", "CPU cores, fractions allowed", "1")
    .option("--gpus <n>", "how many GPUs")
    .option("--gpu-type <types>", "acceptable GPU types, in order of preference: H100,A100")
    .option("-e, --env <KEY=VALUE>", "environment variable (repeatable)", collect)
    .option("--name <id>", "container id (generated when omitted)")
    .option("-l, --label <KEY=VALUE>", "label (repeatable)", collect)
    .option("--block-network", "no outbound network")
    .option("--allow <cidr>", "allow outbound traffic only to this CIDR (repeatable)", collect)
    .option("-p, --port <port>", "container port the host may connect to (repeatable)", collect)
    .option("-w, --workdir <dir>", "working directory inside the container")
    .option("-u, --user <uid[:gid]>", "user to run as")
    .option("--timeout <seconds>", "kill the container after this long")
    .option("-d, --detach", "print the container id and return at once")
    .option("--rm", "remove the container once it ends (attached runs only)")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (image: string, command: string[], o: RunFlags, cmd: Command) => {
      if (o.detach && o.rm) {
        throw new BerthError("invalid_request", "--rm only applies to attached runs; drop --detach or --rm");
      }
      const req = buildRunRequest(image, command, o);
      await withClient(cmd, async (api) => {
        if (o.detach) {
          out.write(`${(await api.runContainer(req)).id}\n`);
          return;
        }
        io.setExitCode(await runAttached(api, req, io, { remove: o.rm ?? false }));
      });
    });

  agent
    .command("ps")
    .description("list the agent's containers (running ones unless --all)")
    .option("-a, --all", "include stopped containers")
    .option("--json", "print JSON")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (o: { all?: boolean; json?: boolean }, cmd: Command) => {
      const list = await withClient(cmd, (api) => api.listContainers());
      const shown = o.all ? list : list.filter((s) => s.state !== "stopped");
      if (o.json) return printJson(shown, out);
      printTable(
        shown.map((s) => psRow(s)),
        PS_COLUMNS,
        out,
      );
    });

  agent
    .command("exec")
    .description("run a command in a running container; exits with its exit code")
    .argument("<id>", "container id")
    .argument("<command...>", "command and arguments (after `--` when they have options)")
    .option("-i, --interactive", "forward stdin to the command")
    .option("-e, --env <KEY=VALUE>", "environment variable (repeatable)", collect)
    .option("-w, --workdir <dir>", "working directory")
    .option("-u, --user <uid[:gid]>", "user to run as")
    .option("--socket <path>", SOCKET_HELP)
    .action(
      async (
        id: string,
        args: string[],
        o: { interactive?: boolean; env?: string[]; workdir?: string; user?: string },
        cmd: Command,
      ) => {
        const req: { args: string[]; env?: Record<string, string>; cwd?: string; user?: string } = { args };
        const env = keyValues(o.env ?? [], "--env");
        if (env) req.env = env;
        if (o.workdir !== undefined) req.cwd = o.workdir;
        if (o.user !== undefined) req.user = o.user;
        const code = await withClient(cmd, (api) =>
          execAttached(api, id, req, io, { stdin: o.interactive ?? false }),
        );
        io.setExitCode(code);
      },
    );

  agent
    .command("logs")
    .description("print a container's logs (stdout lines to stdout, stderr lines to stderr)")
    .argument("<id>", "container id")
    .option("-f, --follow", "keep printing new lines until the container ends")
    .option("--tail <n>", "only the last N lines")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (id: string, o: { follow?: boolean; tail?: string }, cmd: Command) => {
      const opts: { follow: boolean; tail?: number } = { follow: o.follow ?? false };
      if (o.tail !== undefined) opts.tail = parseNonNegativeInt(o.tail, "--tail");
      await withClient(cmd, (api) => printLogs(api, id, io, opts));
    });

  agent
    .command("stop")
    .description("stop a container: SIGTERM, the grace period, then SIGKILL")
    .argument("<id>", "container id")
    .option("--rm", "also remove it and free everything it held")
    .option("--grace <seconds>", "how long to wait after SIGTERM (the agent's default when omitted)")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (id: string, o: { rm?: boolean; grace?: string }, cmd: Command) => {
      const opts: { graceMs?: number; remove?: boolean } = {};
      if (o.grace !== undefined) opts.graceMs = parseSecondsMs(o.grace, "--grace", { allowZero: true });
      if (o.rm) opts.remove = true;
      const s = await withClient(cmd, (api) => api.stopContainer(id, opts));
      out.write(`${s.id}\n`);
    });

  agent
    .command("pull")
    .description("pull an image into the agent's cache")
    .argument("<ref>", "image reference")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const i = await withClient(cmd, (api) => api.pullImage(ref));
      out.write(`${i.ref} ${i.digest} (${imageRow(i).size})\n`);
    });

  agent
    .command("images")
    .description("list the agent's cached images")
    .option("--json", "print JSON")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const list = await withClient(cmd, (api) => api.listImages());
      if (o.json) return printJson(list, out);
      printTable(list.map(imageRow), IMAGE_COLUMNS, out);
    });

  agent
    .command("rmi")
    .description("remove an image from the agent's cache")
    .argument("<ref>", "image reference")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      await withClient(cmd, (api) => api.removeImage(ref));
      out.write(`removed ${ref}\n`);
    });

  agent
    .command("import")
    .description(
      "add an image from an OCI archive, a `docker save` archive, or a rootfs directory or tarball on this host",
    )
    .argument("<path>", "file or directory on this host (relative to the working directory)")
    .requiredOption("--name <ref>", "reference the image is known by afterwards, e.g. myapp:1.0")
    .option("--kind <kind>", "auto, oci-archive, docker-archive or rootfs", "auto")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (path: string, o: { name: string; kind: string }, cmd: Command) => {
      const req = importRequestFromFlags(path, o);
      const i = await withClient(cmd, (api) => api.importImage(req));
      out.write(`${i.ref} ${i.digest} (${imageRow(i).size})\n`);
    });

  agent
    .command("gc")
    .description("free disk: remove images no container has used for a while, and leftover files")
    .option("--unused-hours <h>", "remove images unused for this many hours (0: every unused image)", "24")
    .option("--socket <path>", SOCKET_HELP)
    .action(async (o: { unusedHours: string }, cmd: Command) => {
      const unusedForMs = parseUnusedHours(o.unusedHours);
      const { before, result } = await withClient(cmd, async (api) => ({
        before: await api.listImages(),
        result: await api.gcImages({ unusedForMs }),
      }));
      for (const line of gcLines(result, before)) out.write(`${line}\n`);
    });

  agent
    .command("policy")
    .description("change a running container's outbound network policy")
    .argument("<id>", "container id")
    .option("--block-network", "no outbound network")
    .option("--allow <cidr>", "allow outbound traffic only to this CIDR (repeatable)", collect)
    .option("--open", "unrestricted outbound network")
    .option("--socket <path>", SOCKET_HELP)
    .action(
      async (id: string, o: { blockNetwork?: boolean; allow?: string[]; open?: boolean }, cmd: Command) => {
        const policy = egressFromFlags(o);
        if (!policy)
          throw new BerthError("invalid_request", "give one of --block-network, --allow CIDR or --open");
        const s = await withClient(cmd, (api) => api.setNetworkPolicy(id, policy));
        out.write(`${s.id}: ${describePolicy(s.egress)}\n`);
      },
    );
}
