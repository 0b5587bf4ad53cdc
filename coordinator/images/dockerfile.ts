// A Dockerfile as build steps (Image.from_dockerfile): one FROM, then RUN,
// COPY/ADD of local files from the build context, ENV and WORKDIR, each as
// the agent's steps. The context is a code archive on the agent mounted at
// /mnt/code for COPY steps. Instructions this builder does not carry out
// (multi-stage builds, ADD of URLs, USER, ...) are refused naming the line;
// metadata-only ones (CMD, ENTRYPOINT, EXPOSE, LABEL, ...) do not change the
// files and are refused too rather than silently dropped.

import type { BuildStep } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { shellQuote } from "./steps.ts";

/** Where a COPY step sees the build context (RunnerPaths.code on the agent). */
export const CONTEXT_MOUNT = "/mnt/code";

export interface DockerfileBuild {
  baseImage: string;
  steps: BuildStep[];
  env: Record<string, string>;
}

const bad = (line: number, m: string) => new BerthError("invalid_request", `Dockerfile line ${line}: ${m}`);

/** Logical lines: comments dropped, `\` continuations joined; each with its first line number. */
function logicalLines(text: string): { n: number; text: string }[] {
  const out: { n: number; text: string }[] = [];
  let cur = "";
  let start = 0;
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trimEnd();
    if (cur === "" && (line.trim() === "" || line.trim().startsWith("#"))) return;
    if (cur === "") start = i + 1;
    if (line.endsWith("\\")) {
      cur += `${line.slice(0, -1)} `;
      return;
    }
    cur += line;
    out.push({ n: start, text: cur.trim() });
    cur = "";
  });
  if (cur.trim() !== "") out.push({ n: start, text: cur.trim() });
  return out;
}

/** JSON exec form (`["a", "b"]`) or the shell form as it is. */
function commandOf(args: string, n: number): string {
  if (!args.startsWith("[")) return args;
  let parts: unknown;
  try {
    parts = JSON.parse(args);
  } catch {
    throw bad(n, `${args} is neither a shell command nor a JSON list`);
  }
  if (!Array.isArray(parts) || parts.some((p) => typeof p !== "string"))
    throw bad(n, "the exec form is a list of strings");
  return (parts as string[]).map(shellQuote).join(" ");
}

function checkContextPath(src: string, n: number): string {
  if (/[*?[]/.test(src)) throw bad(n, `COPY source ${src}: wildcards are not supported; name the files`);
  const parts = src.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw bad(n, `COPY source ${src} leaves the build context`);
  return parts.join("/");
}

/** Parses `text` into the agent's steps; `contextSha256` is the context archive COPY steps mount. */
export function dockerfileBuild(text: string, contextSha256: string): DockerfileBuild {
  let baseImage: string | undefined;
  let workdir = "/";
  const env: Record<string, string> = {};
  const steps: BuildStep[] = [];
  for (const { n, text: line } of logicalLines(text)) {
    const m = /^(\S+)\s*(.*)$/.exec(line);
    const op = (m?.[1] ?? "").toUpperCase();
    const args = (m?.[2] ?? "").trim();
    if (op === "FROM") {
      if (baseImage !== undefined) throw bad(n, "multi-stage builds (a second FROM) are not supported");
      const [image, as, , extra] = args.split(/\s+/);
      if (!image || (as && as.toUpperCase() !== "AS") || extra)
        throw bad(n, `FROM ${args}: expected FROM image[:tag] [AS name]`);
      baseImage = image;
      continue;
    }
    if (baseImage === undefined) throw bad(n, `${op} before FROM`);
    const inWorkdir = (cmd: string) => (workdir === "/" ? cmd : `cd ${shellQuote(workdir)} && ${cmd}`);
    switch (op) {
      case "RUN": {
        if (args.startsWith("--")) throw bad(n, `RUN flags (${args.split(/\s/)[0]}) are not supported`);
        steps.push({ name: `RUN ${args}`, run: inWorkdir(commandOf(args, n)) });
        break;
      }
      case "COPY":
      case "ADD": {
        if (args.startsWith("--")) throw bad(n, `${op} flags (${args.split(/\s/)[0]}) are not supported`);
        const words = args.startsWith("[") ? (JSON.parse(args) as string[]) : args.split(/\s+/);
        if (words.length < 2) throw bad(n, `${op} needs a source and a destination`);
        const dest = words.at(-1) as string;
        const sources = words.slice(0, -1).map((s) => {
          if (op === "ADD" && /^[a-z]+:\/\//i.test(s)) throw bad(n, `ADD of a URL (${s}) is not supported`);
          return checkContextPath(s, n);
        });
        const absDest = dest.startsWith("/") ? dest : `${workdir.replace(/\/$/, "")}/${dest}`;
        const intoDir = dest.endsWith("/") || sources.length > 1;
        const target = intoDir ? `${absDest.replace(/\/?$/, "/")}` : absDest;
        const mk = intoDir ? `mkdir -p ${shellQuote(target)}` : `mkdir -p "$(dirname ${shellQuote(target)})"`;
        // A directory source copies its contents, as Docker does; a file copies itself.
        const copies = sources.map((s) => {
          const from = shellQuote(s === "" ? CONTEXT_MOUNT : `${CONTEXT_MOUNT}/${s}`);
          return `if [ -d ${from} ]; then mkdir -p ${shellQuote(target)} && cp -a ${from}/. ${shellQuote(target)}; else cp -a ${from} ${shellQuote(target)}; fi`;
        });
        steps.push({
          name: `${op} ${args}`,
          run: [mk, ...copies].join(" && "),
          code: { sha256: contextSha256 },
        });
        break;
      }
      case "ENV": {
        const eq = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(args);
        const sp = /^([A-Za-z_][A-Za-z0-9_]*)\s+(.*)$/.exec(args);
        const kv = eq ?? sp;
        if (!kv || (eq && /\s[A-Za-z_][A-Za-z0-9_]*=/.test(args))) {
          throw bad(n, `ENV ${args}: give one KEY=VALUE (or KEY VALUE) per ENV line`);
        }
        env[kv[1] as string] = (kv[2] as string).replace(/^"(.*)"$/, "$1");
        break;
      }
      case "WORKDIR": {
        if (!args) throw bad(n, "WORKDIR needs a path");
        workdir = args.startsWith("/") ? args : `${workdir.replace(/\/$/, "")}/${args}`;
        steps.push({ name: `WORKDIR ${args}`, run: `mkdir -p ${shellQuote(workdir)}` });
        break;
      }
      default:
        throw bad(
          n,
          `${op} is not supported by this cluster's Dockerfile builds (FROM, RUN, COPY, ADD of local files, ENV and WORKDIR are)`,
        );
    }
  }
  if (baseImage === undefined) throw new BerthError("invalid_request", "the Dockerfile has no FROM");
  return { baseImage, steps, env };
}
