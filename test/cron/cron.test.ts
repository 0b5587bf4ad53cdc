import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  CronError,
  type CronSchedule,
  nextFire,
  parseCron,
  previousFire,
} from "../../coordinator/schedules/cron.ts";
import { isBerthError } from "../../shared/errors.ts";

const at = (iso: string) => new Date(iso);
const next = (expr: string, after: string) => nextFire(parseCron(expr), at(after)).toISOString();
const prev = (expr: string, before: string) => previousFire(parseCron(expr), at(before)).toISOString();

/** The values a field fires on, as a list. */
const on = (set: readonly boolean[]) => set.flatMap((v, i) => (v ? [i] : []));

/** The next `n` fire times after `after`. */
function fires(expr: string, after: string, n: number): string[] {
  const s = parseCron(expr);
  const out: string[] = [];
  let t = at(after);
  for (let i = 0; i < n; i++) {
    t = nextFire(s, t);
    out.push(t.toISOString());
  }
  return out;
}

describe("parseCron fields", () => {
  test("stars, single values, lists, ranges and steps", () => {
    const s = parseCron("*/15 1,2,3 1-5 */4 1-5/2");
    assert.deepEqual(on(s.minutes), [0, 15, 30, 45]);
    assert.deepEqual(on(s.hours), [1, 2, 3]);
    assert.deepEqual(on(s.daysOfMonth), [1, 2, 3, 4, 5]);
    assert.deepEqual(on(s.months), [1, 5, 9]);
    assert.deepEqual(on(s.daysOfWeek), [1, 3, 5]);
    assert.equal(on(parseCron("* * * * *").minutes).length, 60);
    assert.deepEqual(on(parseCron("1-30/7 * * * *").minutes), [1, 8, 15, 22, 29]);
    assert.deepEqual(on(parseCron("0,5-7,50-59/3 * * * *").minutes), [0, 5, 6, 7, 50, 53, 56, 59]);
  });

  test("A/S runs from A to the field's maximum", () => {
    assert.deepEqual(on(parseCron("50/3 * * * *").minutes), [50, 53, 56, 59]);
    assert.deepEqual(on(parseCron("0 20/2 * * *").hours), [20, 22]);
    // Day-of-week stops at Saturday: 7 would be a second Sunday.
    assert.deepEqual(on(parseCron("0 0 * * 1/2").daysOfWeek), [1, 3, 5]);
    assert.deepEqual(on(parseCron("0 0 * * 6/5").daysOfWeek), [6]);
  });

  test("month and weekday names, any case, also in ranges", () => {
    const s = parseCron("0 0 * jan,Mar-may,DEC mon-FRI");
    assert.deepEqual(on(s.months), [1, 3, 4, 5, 12]);
    assert.deepEqual(on(s.daysOfWeek), [1, 2, 3, 4, 5]);
    assert.deepEqual(on(parseCron("0 0 * * SUN,sat").daysOfWeek), [0, 6]);
    assert.deepEqual(on(parseCron("0 0 * FEB-APR/2 *").months), [2, 4]);
  });

  test("Sunday is 0 or 7, also at the end of a range", () => {
    assert.deepEqual(on(parseCron("0 0 * * 0").daysOfWeek), [0]);
    assert.deepEqual(on(parseCron("0 0 * * 7").daysOfWeek), [0]);
    assert.deepEqual(on(parseCron("0 0 * * 5-7").daysOfWeek), [0, 5, 6]);
    assert.deepEqual(on(parseCron("0 0 * * */2").daysOfWeek), [0, 2, 4, 6]);
  });

  test("macros mean their five-field forms", () => {
    const same = (a: CronSchedule, b: CronSchedule) =>
      assert.deepEqual({ ...a, source: "" }, { ...b, source: "" });
    same(parseCron("@yearly"), parseCron("0 0 1 1 *"));
    same(parseCron("@annually"), parseCron("0 0 1 1 *"));
    same(parseCron("@monthly"), parseCron("0 0 1 * *"));
    same(parseCron("@weekly"), parseCron("0 0 * * 0"));
    same(parseCron("@daily"), parseCron("0 0 * * *"));
    same(parseCron("@midnight"), parseCron("0 0 * * *"));
    same(parseCron("@HOURLY"), parseCron("0 * * * *"));
    assert.equal(parseCron("  @daily ").source, "@daily");
  });

  test("whitespace between fields may be any run of spaces and tabs", () => {
    assert.deepEqual(on(parseCron(" 5\t 4  * * * ").minutes), [5]);
  });
});

describe("parseCron refuses bad input, naming the field and the reason", () => {
  const cases: [string, RegExp, string | undefined][] = [
    ["61 * * * *", /minute field "61": 61 is out of range 0-59/, "minute"],
    ["* 24 * * *", /hour field "24": 24 is out of range 0-23/, "hour"],
    ["* * 0 * *", /day-of-month field "0": 0 is out of range 1-31/, "day-of-month"],
    ["* * 32 * *", /day-of-month field "32": 32 is out of range 1-31/, "day-of-month"],
    ["* * * 13 *", /month field "13": 13 is out of range 1-12/, "month"],
    ["* * * 0 *", /month field "0": 0 is out of range 1-12/, "month"],
    ["* * * * 8", /day-of-week field "8": 8 is out of range 0-7/, "day-of-week"],
    [
      "* * * * MONDAY",
      /day-of-week field "MONDAY": "MONDAY" is not a number or a name SUN..SAT/,
      "day-of-week",
    ],
    ["* * * * JAN", /day-of-week field "JAN": "JAN" is not a number/, "day-of-week"],
    ["MON * * * *", /minute field "MON": "MON" is not a number$/, "minute"],
    ["*/0 * * * *", /minute field "\*\/0": step 0 is not allowed/, "minute"],
    ["*/x * * * *", /minute field "\*\/x": step "x" is not a whole number/, "minute"],
    ["1/2/3 * * * *", /minute field "1\/2\/3": "1\/2\/3" has more than one \//, "minute"],
    ["30-10 * * * *", /minute field "30-10": range 30-10 runs backwards \(30 > 10\)/, "minute"],
    ["1-2-3 * * * *", /minute field "1-2-3": "1-2-3" is not a value or a range A-B/, "minute"],
    ["1,,2 * * * *", /minute field "1,,2": empty list item/, "minute"],
    ["1, * * * *", /minute field "1,": empty list item/, "minute"],
    ["-5 * * * *", /minute field "-5": missing number/, "minute"],
    ["* * * * 1-", /day-of-week field "1-": missing number/, "day-of-week"],
    ["1.5 * * * *", /minute field "1.5": "1.5" is not a number/, "minute"],
    ["0 0 30 2 *", /day-of-month field "30": no selected month has such a day/, "day-of-month"],
    ["0 0 31 4,6,9,11 *", /day-of-month field "31": no selected month has such a day/, "day-of-month"],
    ["* * * *", /expected 5 fields \(minute hour day-of-month month day-of-week\), got 4$/, undefined],
    ["0 * * * * *", /got 6; seconds and years fields are not supported/, undefined],
    ["", /empty expression/, undefined],
    ["   ", /empty expression/, undefined],
    ["@reboot", /unknown macro @reboot \(known: @yearly/, undefined],
    ["@every 5m", /unknown macro @every 5m/, undefined],
  ];
  for (const [expr, message, field] of cases) {
    test(JSON.stringify(expr), () => {
      const e = (() => {
        try {
          parseCron(expr);
        } catch (err) {
          return err;
        }
        assert.fail(`${expr} parsed`);
      })();
      assert.ok(e instanceof CronError);
      assert.match(e.message, message);
      assert.ok(e.message.startsWith(`cron expression "${expr.trim()}": `), e.message);
      assert.equal(e.field, field);
      // A BerthError with invalid_request: the HTTP layer answers 400 with the message.
      assert.ok(isBerthError(e));
      assert.equal(e.code, "invalid_request");
    });
  }

  test("30 February is fine when a weekday is also given (either matches) or another month has day 30", () => {
    parseCron("0 0 30 2 MON");
    parseCron("0 0 30 2,3 *");
    parseCron("0 0 29 2 *");
  });
});

describe("nextFire", () => {
  test("is strictly after, on whole minutes", () => {
    assert.equal(next("* * * * *", "2024-05-01T10:00:00.000Z"), "2024-05-01T10:01:00.000Z");
    assert.equal(next("* * * * *", "2024-05-01T10:00:59.999Z"), "2024-05-01T10:01:00.000Z");
    assert.equal(next("*/5 * * * *", "2024-05-01T10:04:59.000Z"), "2024-05-01T10:05:00.000Z");
    assert.equal(next("*/5 * * * *", "2024-05-01T10:05:00.000Z"), "2024-05-01T10:10:00.000Z");
    assert.deepEqual(fires("*/20 * * * *", "2024-05-01T23:30:00Z", 3), [
      "2024-05-01T23:40:00.000Z",
      "2024-05-02T00:00:00.000Z",
      "2024-05-02T00:20:00.000Z",
    ]);
  });

  test("hours and minutes together", () => {
    assert.deepEqual(fires("15,45 9-10 * * *", "2024-05-01T09:50:00Z", 4), [
      "2024-05-01T10:15:00.000Z",
      "2024-05-01T10:45:00.000Z",
      "2024-05-02T09:15:00.000Z",
      "2024-05-02T09:45:00.000Z",
    ]);
    assert.equal(next("@hourly", "2024-05-01T09:00:00Z"), "2024-05-01T10:00:00.000Z");
    assert.equal(next("@daily", "2024-05-01T00:00:00Z"), "2024-05-02T00:00:00.000Z");
  });

  test("29 February only in leap years, skipping 2100", () => {
    assert.deepEqual(fires("0 12 29 2 *", "2023-03-01T00:00:00Z", 3), [
      "2024-02-29T12:00:00.000Z",
      "2028-02-29T12:00:00.000Z",
      "2032-02-29T12:00:00.000Z",
    ]);
    assert.equal(next("0 0 29 2 *", "2096-03-01T00:00:00Z"), "2104-02-29T00:00:00.000Z");
  });

  test("month ends: day 31 skips months without it, day 30 skips February", () => {
    assert.deepEqual(fires("0 0 31 * *", "2024-01-31T00:00:00Z", 4), [
      "2024-03-31T00:00:00.000Z",
      "2024-05-31T00:00:00.000Z",
      "2024-07-31T00:00:00.000Z",
      "2024-08-31T00:00:00.000Z",
    ]);
    assert.equal(next("0 0 30 * *", "2025-01-30T00:00:00Z"), "2025-03-30T00:00:00.000Z");
    assert.equal(next("59 23 28-31 2 *", "2025-02-28T23:59:00Z"), "2026-02-28T23:59:00.000Z");
    assert.equal(next("59 23 28-31 2 *", "2024-02-28T23:59:00Z"), "2024-02-29T23:59:00.000Z");
  });

  test("year rollover", () => {
    assert.equal(next("* * * * *", "2024-12-31T23:59:00Z"), "2025-01-01T00:00:00.000Z");
    assert.equal(next("@yearly", "2024-06-15T08:00:00Z"), "2025-01-01T00:00:00.000Z");
    assert.equal(next("0 9 * JAN MON", "2024-12-31T00:00:00Z"), "2025-01-06T09:00:00.000Z");
    assert.equal(next("30 6 15 NOV,FEB *", "2024-11-15T06:30:00Z"), "2025-02-15T06:30:00.000Z");
  });

  test("day-of-week alone, and Sunday as 7", () => {
    // 2024-05-01 is a Wednesday.
    assert.equal(next("0 0 * * MON", "2024-05-01T00:00:00Z"), "2024-05-06T00:00:00.000Z");
    assert.equal(next("0 0 * * 7", "2024-05-01T00:00:00Z"), "2024-05-05T00:00:00.000Z");
    assert.equal(next("@weekly", "2024-05-05T00:00:00Z"), "2024-05-12T00:00:00.000Z");
    assert.deepEqual(fires("0 8 * * MON-FRI", "2024-05-03T09:00:00Z", 2), [
      "2024-05-06T08:00:00.000Z",
      "2024-05-07T08:00:00.000Z",
    ]);
  });

  test("both day fields restricted: a day matching either fires (OR)", () => {
    // The 13th, and every Friday. May 2024: Fridays 3, 10, 17, 24, 31.
    assert.deepEqual(fires("0 0 13 * FRI", "2024-05-01T00:00:00Z", 6), [
      "2024-05-03T00:00:00.000Z",
      "2024-05-10T00:00:00.000Z",
      "2024-05-13T00:00:00.000Z",
      "2024-05-17T00:00:00.000Z",
      "2024-05-24T00:00:00.000Z",
      "2024-05-31T00:00:00.000Z",
    ]);
    // 30 February never exists, but Mondays in February do.
    assert.equal(next("0 0 30 2 MON", "2024-01-01T00:00:00Z"), "2024-02-05T00:00:00.000Z");
  });

  test("a day field starting with * leaves the other one alone to decide (AND, as Vixie cron)", () => {
    // Odd days that are also Mondays: 2024-05-13 (Mon, odd), not 6 or 20 (even).
    assert.deepEqual(fires("0 0 */2 * MON", "2024-05-01T00:00:00Z", 2), [
      "2024-05-13T00:00:00.000Z",
      "2024-05-27T00:00:00.000Z",
    ]);
    // Day-of-month only.
    assert.equal(next("0 0 13 * *", "2024-05-01T00:00:00Z"), "2024-05-13T00:00:00.000Z");
    assert.equal(next("0 0 13 * */1", "2024-05-01T00:00:00Z"), "2024-05-13T00:00:00.000Z");
  });

  test("agrees with a minute-by-minute scan on many expressions", () => {
    const exprs = [
      "*/7 */5 * * *",
      "3-59/13 1,13 1-10,20 * *",
      "0 0 13 * FRI",
      "5 4 */3 2-4 SAT",
      "0 */6 29-31 * *",
      "45 23 * * SUN",
      "0 0 1,15 * 3",
      "59 23 31 DEC *",
    ];
    for (const expr of exprs) {
      const s = parseCron(expr);
      const matches = (t: number) => {
        const d = new Date(t);
        const dom = s.daysOfMonth[d.getUTCDate()] === true;
        const dow = s.daysOfWeek[d.getUTCDay()] === true;
        const day = s.domRestricted && s.dowRestricted ? dom || dow : dom && dow;
        return (
          day &&
          !!s.months[d.getUTCMonth() + 1] &&
          !!s.hours[d.getUTCHours()] &&
          !!s.minutes[d.getUTCMinutes()]
        );
      };
      let t = Date.UTC(2023, 11, 20, 7, 31, 12);
      for (let k = 0; k < 15; k++) {
        let scan = Math.floor(t / 60_000) * 60_000 + 60_000;
        while (!matches(scan)) scan += 60_000;
        const got = nextFire(s, new Date(t)).getTime();
        assert.equal(
          new Date(got).toISOString(),
          new Date(scan).toISOString(),
          `${expr} after ${new Date(t).toISOString()}`,
        );
        // Between two fire times there is none other, looking back either.
        if (k > 0) assert.equal(previousFire(s, new Date(got)).getTime(), t);
        t = got;
      }
    }
  });
});

describe("previousFire", () => {
  test("is strictly before, on whole minutes", () => {
    assert.equal(prev("* * * * *", "2024-05-01T10:00:00.000Z"), "2024-05-01T09:59:00.000Z");
    assert.equal(prev("* * * * *", "2024-05-01T10:00:00.001Z"), "2024-05-01T10:00:00.000Z");
    assert.equal(prev("*/5 * * * *", "2024-05-01T10:04:59Z"), "2024-05-01T10:00:00.000Z");
    assert.equal(prev("@hourly", "2024-05-01T00:30:00Z"), "2024-05-01T00:00:00.000Z");
  });

  test("month ends, leap days and year rollover going backwards", () => {
    assert.equal(prev("0 0 31 * *", "2024-05-01T00:00:00Z"), "2024-03-31T00:00:00.000Z");
    assert.equal(prev("0 12 29 2 *", "2028-01-01T00:00:00Z"), "2024-02-29T12:00:00.000Z");
    assert.equal(prev("0 0 29 2 *", "2104-01-01T00:00:00Z"), "2096-02-29T00:00:00.000Z");
    assert.equal(prev("@yearly", "2025-01-01T00:00:00Z"), "2024-01-01T00:00:00.000Z");
    assert.equal(prev("30 23 * * *", "2025-01-01T00:10:00Z"), "2024-12-31T23:30:00.000Z");
    assert.equal(prev("0 0 13 * FRI", "2024-05-13T00:00:00Z"), "2024-05-10T00:00:00.000Z");
    assert.equal(prev("15 9 * * MON-FRI", "2024-05-06T09:00:00Z"), "2024-05-03T09:15:00.000Z");
  });

  test("walks back through exactly the times nextFire walks forward", () => {
    for (const expr of ["*/7 */5 * * *", "0 0 13 * FRI", "5 4 */3 2-4 SAT", "0 */6 29-31 * *"]) {
      const s = parseCron(expr);
      const forward: number[] = [];
      let t = new Date("2024-01-01T00:00:00Z");
      for (let i = 0; i < 40; i++) {
        t = nextFire(s, t);
        forward.push(t.getTime());
      }
      for (let i = forward.length - 1; i > 0; i--)
        assert.equal(previousFire(s, new Date(forward[i] as number)).getTime(), forward[i - 1], expr);
    }
  });
});
