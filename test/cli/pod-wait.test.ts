import assert from "node:assert/strict";
import { test } from "node:test";
import { waitForPodStart } from "../../cli/deploy/pod-wait.ts";

/** The deployment answers in turn (the last one repeats), as GET /api/v1/deployment/{ws}/{id} would. */
function answers(...list: { containers: number; start_error: string | null }[]) {
  let i = 0;
  return {
    seen: () => i,
    get: async (_id: string) => list[Math.min(i++, list.length - 1)] as never,
  };
}

test("a start error of the deployment is what the CLI reports", async () => {
  const routes = answers(
    { containers: 0, start_error: null },
    { containers: 1, start_error: null },
    { containers: 0, start_error: 'exec: "python": executable file not found in $PATH' },
  );
  assert.deepEqual(await waitForPodStart(routes, "dep-1", { pollMs: 1, settleS: 60 }), {
    ok: false,
    error: 'exec: "python": executable file not found in $PATH',
  });
});

test("a container that stays up through settleS is started; none within waitS is pending", async () => {
  const up = answers({ containers: 0, start_error: null }, { containers: 1, start_error: null });
  assert.deepEqual(await waitForPodStart(up, "dep-1", { pollMs: 1, settleS: 0.01 }), { ok: true });
  const never = answers({ containers: 0, start_error: null });
  assert.deepEqual(await waitForPodStart(never, "dep-1", { pollMs: 1, waitS: 0.02 }), { ok: "pending" });
});
