// The volume space quota: max_volume_mb set through the limits route (a real
// SQLite store, migration 0013) reads back with the volumes' usage in MiB,
// and an upload that would pass it is refused with limit_exceeded while one
// that fits goes through; null lifts it.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { limitRoutes } from "../../coordinator/limits/routes.ts";
import { volumeRoutes } from "../../coordinator/volumes/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { Store } from "../../coordinator/records.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { VolumeFiles } from "../../coordinator/volumes/volume-files.ts";
import { bearer } from "../helpers/auth.ts";
import { tempDir } from "../helpers/env.ts";
import { routesApp } from "../helpers/routes-app.ts";

const MiB = 1024 * 1024;

describe("volume quota", () => {
  const cleanups: (() => unknown)[] = [];
  const later = { after: (fn: () => unknown) => cleanups.push(fn) };
  let app: FastifyInstance;
  let ws: Workspace;
  let admin: string;
  let user: string;

  before(async () => {
    const dir = tempDir(later);
    const store = await Store.open(`sqlite:${dir}/berth.db`);
    cleanups.push(() => store.close());
    ws = await store.workspaces.create("team");
    admin = (await store.tokens.create(ws.id, { name: "a", admin: true })).secret;
    user = (await store.tokens.create(ws.id, { name: "u" })).secret;
    const files = new VolumeFiles(`${dir}/volumes`);
    app = routesApp();
    await app.register(
      tokenScope(
        store.tokens,
        limitRoutes({
          workspaces: store.workspaces,
          limits: store.limits,
          usage: { volumeBytes: (id) => files.workspaceBytes(id) },
        }),
        volumeRoutes({
          files,
          maxVolumeBytes: async (id) => {
            const mb = (await store.limits.get(id)).maxVolumeMb;
            return mb === null ? null : mb * MiB;
          },
        }),
      ),
    );
    cleanups.push(() => app.close());
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  const put = (path: string, bytes: Buffer) =>
    app.inject({
      method: "PUT",
      url: `/api/v1/volume/${ws.externalId}/${path}`,
      headers: { ...bearer(user), "content-type": "application/octet-stream" },
      payload: bytes,
    });

  test("max_volume_mb is set and read with usage, and uploads past it are refused", async () => {
    const set = await app.inject({
      method: "PUT",
      url: `/api/v1/workspace/${ws.externalId}/limits`,
      headers: bearer(admin),
      payload: { max_volume_mb: 2 },
    });
    assert.equal(set.statusCode, 200, set.body);
    assert.equal(set.json().limits.max_volume_mb, 2);

    assert.equal((await put("w/files/a.bin", Buffer.alloc(MiB + 1))).statusCode, 200);
    const read = await app.inject({
      method: "GET",
      url: `/api/v1/workspace/${ws.externalId}/limits`,
      headers: bearer(user),
    });
    assert.equal(read.json().usage.volume_mb, 2, "usage in MiB, rounded up");

    const over = await put("w/files/b.bin", Buffer.alloc(MiB));
    assert.equal(over.statusCode, 429);
    assert.equal(over.json().error.code, "limit_exceeded");
    assert.match(over.json().error.message, /max_volume_mb allows 2097152/);
    assert.equal(
      (await put("w/files/c.bin", Buffer.alloc(1000))).statusCode,
      200,
      "what still fits goes through",
    );

    await app.inject({
      method: "PUT",
      url: `/api/v1/workspace/${ws.externalId}/limits`,
      headers: bearer(admin),
      payload: { max_volume_mb: null },
    });
    assert.equal((await put("w/files/b.bin", Buffer.alloc(MiB))).statusCode, 200);
  });
});
