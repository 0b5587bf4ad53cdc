// integrations.VLLM on a real `berth up` cluster: `berth deploy app.py:llm`
// registers an ASGI deployment that declares its served models to the /v1
// gateway, and the unmodified `openai` npm client streams a chat completion
// through it. vLLM itself cannot be installed here (no PyPI, no GPU), so the
// app's directory carries a stand-in `vllm` package whose
// vllm.entrypoints.openai.api_server is test/fixtures/inference/vllm_standin_server.py:
// the container's VLLM app starts it as it starts vLLM (same module, flags,
// /health) and passes requests through; the usage row holds its counts and
// a client hanging up aborts its stream. A deployment whose image lacks vllm
// answers every request with the error naming the fix.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { bearer } from "../helpers/auth.ts";
import { type BerthUp, CLI_BIN, startBerthUp, UP_COMMANDS } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown } from "../network/helpers.ts";

const STANDIN = fileURLToPath(new URL("../fixtures/inference/vllm_standin_server.py", import.meta.url));

const APP = `
from berth import Image, integrations
from berth.integrations import VLLMArgs

# Image() as given: the vllm package is the stand-in beside this file.
llm = integrations.VLLM(name="tiny-vllm", image=Image(), vllm_args=VLLMArgs(model="standin/tiny"))
`;

const NO_VLLM_APP = `
from berth import Image, integrations
from berth.integrations import VLLMArgs

missing = integrations.VLLM(name="no-vllm", image=Image(), vllm_args=VLLMArgs(model="standin/none"))
`;

function writeApps(dir: string): string {
  writeFileSync(join(dir, "app.py"), APP);
  const pkg = join(dir, "vllm", "entrypoints", "openai");
  mkdirSync(pkg, { recursive: true });
  for (const d of ["vllm", "vllm/entrypoints", "vllm/entrypoints/openai"])
    writeFileSync(join(dir, d, "__init__.py"), "");
  copyFileSync(STANDIN, join(pkg, "api_server.py"));
  // Its own code directory, without the stand-in.
  const bare = join(dir, "novllm");
  mkdirSync(bare);
  writeFileSync(join(bare, "app.py"), NO_VLLM_APP);
  return bare;
}

async function deploy(up: BerthUp, cwd: string, target: string): Promise<void> {
  const r = await new Promise<{ code: number; out: string }>((resolve) =>
    execFile(
      process.execPath,
      [CLI_BIN, "deploy", target],
      { cwd, env: up.env, timeout: 240_000 },
      (e, o, s) => resolve({ code: e ? 1 : 0, out: `${o}\n${s}` }),
    ),
  );
  assert.equal(r.code, 0, `berth deploy ${target}: ${r.out}\n${up.output()}`);
}

test("integrations.VLLM: deployed with berth deploy, served through /v1", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const bare = writeApps(up.appDir);
  await deploy(up, up.appDir, "app.py:llm");
  await deploy(up, bare, "app.py:missing");
  const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: up.token, maxRetries: 0, timeout: 300_000 });

  await t.test("its served model names are the gateway's models", async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids.sort(), ["no-vllm", "standin/none", "standin/tiny", "tiny-vllm"]);
  });

  await t.test("the openai client streams a chat completion from the vLLM server process", async () => {
    const stream = await client.chat.completions.create({
      model: "tiny-vllm",
      messages: [{ role: "user", content: "one two three four" }],
      stream: true,
    });
    const words: string[] = [];
    for await (const c of stream) words.push(c.choices[0]?.delta.content ?? "");
    assert.deepEqual(words, ["one", "two", "three", "four"]);
    // The model's own name reaches vLLM too (it serves both names).
    const again = await client.chat.completions.create({
      model: "standin/tiny",
      messages: [{ role: "user", content: "five" }],
      stream: true,
    });
    const more: string[] = [];
    for await (const c of again) more.push(c.choices[0]?.delta.content ?? "");
    assert.deepEqual(more, ["five"]);
  });

  await t.test("the usage row holds the counts vLLM reported", async () => {
    const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
      .external_id;
    const r = await up.api(`/api/v1/usage/${ws}?model=tiny-vllm`);
    const rows = (
      (await r.json()) as { usage: { stream: boolean; prompt_tokens: number; completion_tokens: number }[] }
    ).usage;
    const row = rows.find((u) => u.stream);
    assert.ok(row, `a usage row of the stream: ${JSON.stringify(rows)}`);
    assert.deepEqual([row.prompt_tokens, row.completion_tokens], [4, 4]);
  });

  await t.test("a client that hangs up mid-stream stops vLLM's generation", async () => {
    const abort = new AbortController();
    const stream = await client.chat.completions.create(
      {
        model: "tiny-vllm",
        messages: [{ role: "user", content: "on and on" }],
        stream: true,
        max_tokens: 1000,
      },
      { signal: abort.signal },
    );
    let seen = 0;
    try {
      for await (const c of stream) {
        if (c.choices[0]?.delta.content) seen++;
        if (seen === 2) abort.abort();
      }
    } catch (e) {
      // The client ends the iteration, or throws its abort error: either way it hung up.
      if (!(e instanceof OpenAI.APIUserAbortError)) throw e;
    }
    assert.equal(seen, 2);
    const stats = async () =>
      (await (await up.api("/endpoint/tiny-vllm/stats")).json()) as { aborted: number };
    await waitUntil(async () => (await stats()).aborted === 1, {
      what: "vLLM aborted the stream",
      timeoutMs: 60_000,
    });
  });

  await t.test("without vllm in the image every request hears what to do", async () => {
    const r = await fetch(`${up.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...bearer(up.token), "content-type": "application/json" },
      body: JSON.stringify({ model: "no-vllm", messages: [{ role: "user", content: "hi" }] }),
    });
    const text = await r.text();
    assert.equal(r.status, 500, text);
    assert.match(text, /the package 'vllm' is not installed in this container's image/);
    assert.match(text, /add_python_packages\(\['vllm'\]\)/);
  });
});
