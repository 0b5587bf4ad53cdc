import { describeError } from "../../shared/errors.ts";

/**
 * Runs a long-lived service until SIGINT/SIGTERM, then stops it. A start-up
 * failure is printed as one line naming the process and the cause.
 */
export async function runUntilSignal(
  name: string,
  start: () => Promise<{ stop(): Promise<void> }>,
): Promise<void> {
  let svc: { stop(): Promise<void> };
  try {
    svc = await start();
  } catch (e) {
    process.stderr.write(`berth ${name}: ${describeError(e)}\n`);
    process.exit(1);
  }
  await new Promise<void>((resolve) => {
    let stopping = false;
    const onSignal = async () => {
      if (stopping) return;
      stopping = true;
      const force = setTimeout(() => process.exit(1), 20_000);
      force.unref();
      try {
        await svc.stop();
      } catch (e) {
        process.stderr.write(`berth ${name}: error while stopping: ${describeError(e)}\n`);
      }
      resolve();
    };
    // Under `berth up`, Ctrl-C reaches the whole process group at once; up
    // then stops its children one by one (the coordinator before the agent,
    // so it can still stop its containers), so a child waits for its SIGTERM.
    if (process.env.BERTH_UNDER_UP === "1") process.on("SIGINT", () => {});
    else process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
  });
}
