// A Dockerfile as build steps: FROM, RUN (shell and exec form), COPY/ADD of
// local files from the context mounted at /mnt/code, ENV, WORKDIR; what the
// builder does not carry out is refused naming the line.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { dockerfileBuild } from "../../coordinator/images/dockerfile.ts";

const SHA = "a".repeat(64);

test("FROM, RUN, COPY, ENV, WORKDIR become steps; COPY steps mount the context", () => {
  const b = dockerfileBuild(
    [
      "# a comment",
      "FROM registry.example:5000/base:1 AS build",
      "ENV GREETING=hello",
      "WORKDIR /opt/app",
      "COPY app.txt ./",
      'RUN ["python3", "-c", "print(1)"]',
      "RUN echo one \\",
      "  && echo two",
    ].join("\n"),
    SHA,
  );
  assert.equal(b.baseImage, "registry.example:5000/base:1");
  assert.deepEqual(b.env, { GREETING: "hello" });
  assert.deepEqual(
    b.steps.map((s) => [s.name, s.code?.sha256 ?? ""]),
    [
      ["WORKDIR /opt/app", ""],
      ["COPY app.txt ./", SHA],
      ['RUN ["python3", "-c", "print(1)"]', ""],
      ["RUN echo one    && echo two", ""],
    ],
  );
  assert.equal(b.steps[2]?.run, "cd '/opt/app' && 'python3' '-c' 'print(1)'");
});

test("COPY copies a file or a directory's contents as Docker does (run by sh here, on a stand-in context)", () => {
  const root = mkdtempSync(join(tmpdir(), "berth-df-"));
  try {
    const ctx = join(root, "ctx");
    mkdirSync(join(ctx, "dir", "sub"), { recursive: true });
    writeFileSync(join(ctx, "one.txt"), "one\n");
    writeFileSync(join(ctx, "dir", "sub", "two.txt"), "two\n");
    const b = dockerfileBuild(
      `FROM x\nCOPY one.txt /out/a/renamed.txt\nCOPY dir /out/d\nCOPY one.txt dir/ /out/both/\n`,
      SHA,
    );
    for (const s of b.steps) {
      const run = s.run.replaceAll("/mnt/code", ctx).replaceAll("'/out", `'${root}/out`);
      execFileSync("sh", ["-c", run]);
    }
    assert.equal(readFileSync(join(root, "out", "a", "renamed.txt"), "utf8"), "one\n");
    assert.equal(readFileSync(join(root, "out", "d", "sub", "two.txt"), "utf8"), "two\n");
    assert.equal(readFileSync(join(root, "out", "both", "one.txt"), "utf8"), "one\n");
    assert.equal(readFileSync(join(root, "out", "both", "sub", "two.txt"), "utf8"), "two\n");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("what the builder does not do is refused naming the line", () => {
  const refused = (text: string, re: RegExp) => assert.throws(() => dockerfileBuild(text, SHA), re);
  refused("RUN echo", /line 1: RUN before FROM/);
  refused("FROM a\nFROM b", /line 2: multi-stage/);
  refused("FROM a\nCOPY --from=x a b", /line 2: COPY flags/);
  refused("FROM a\nCOPY ../secret /x", /leaves the build context/);
  refused("FROM a\nCOPY *.txt /x/", /wildcards/);
  refused("FROM a\nADD https://example.com/x /x", /ADD of a URL/);
  refused("FROM a\nUSER nobody", /line 2: USER is not supported/);
  refused("FROM a\nCMD python3", /CMD is not supported/);
  refused("# nothing", /no FROM/);
});
