// Teardown for harnesses that start several things, and one harness for all
// the tests of a describe block.

import { after, before } from "node:test";

/**
 * Starts a harness in the enclosing describe's `before` and tears it down in
 * its `after` (what `start` defers, last in, first out). Call it at the top
 * level of the describe; the returned object is filled in by the time the
 * tests run, so `start` must return a plain object (its own properties are copied).
 */
export function perSuite<T extends object>(
  start: (suite: { after: (fn: () => unknown) => void }) => Promise<T>,
): T {
  const harness = {} as T;
  const { later } = teardownStack({ after });
  before(async () => {
    Object.assign(harness, await start(later));
  });
  return harness;
}

export interface TeardownStack {
  /** Adds a teardown step: it runs before every step added earlier. */
  defer(fn: () => unknown): void;
  /** A `t` whose after() defers, for helpers that take one. */
  later: { after: (fn: () => unknown) => void };
}

/** Teardown steps run last in, first out, in one after-hook of `suite`. */
export function teardownStack(suite: { after: (fn: () => unknown) => void }): TeardownStack {
  const steps: (() => unknown)[] = [];
  suite.after(async () => {
    for (const fn of steps.reverse()) await fn();
  });
  const defer = (fn: () => unknown) => void steps.push(fn);
  return { defer, later: { after: defer } };
}
