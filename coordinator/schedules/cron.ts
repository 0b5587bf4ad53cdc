// Cron expressions: the standard five fields, evaluated in UTC.
//
//   minute  hour  day-of-month  month  day-of-week
//   0-59    0-23  1-31          1-12   0-7 (0 and 7 are Sunday)
//
// Each field is `*` or a comma list of `N`, `A-B`, `*/S`, `A-B/S` or `A/S`
// (A up to the field's maximum, every S). Months and weekdays also take
// three-letter English names (JAN..DEC, SUN..SAT), in any case. Macros:
// @yearly @annually @monthly @weekly @daily @midnight @hourly.
//
// Day-of-month and day-of-week follow Vixie cron (the cron of Debian and
// most Linux systems): when both are restricted a day matches if EITHER
// matches; a field whose text starts with `*` (`*`, `*/2`) counts as
// unrestricted, so the other day field alone decides.
//
// Time zones are not supported: every expression is read in UTC, so a
// schedule never fires twice or not at all around a daylight saving change.
//
// Fire times come from croner. The syntax above is checked here first:
// croner takes more (seconds and year fields, L, W, #, ?) and says less
// about what is wrong, and a refusal must name the field. croner is then
// given the parsed sets as plain comma lists, with the day rule chosen by
// the Vixie test above (croner's own test looks only for a bare `*`).

import { Cron } from "croner";
import { BerthError } from "../../shared/errors.ts";

/** A refused cron expression; its message names the field and the reason. */
export class CronError extends BerthError {
  constructor(
    readonly expression: string,
    reason: string,
    /** The field at fault, absent when the expression as a whole is wrong. */
    readonly field?: CronFieldName,
  ) {
    super("invalid_request", `cron expression "${expression}": ${reason}`, {
      expression,
      ...(field ? { field } : {}),
    });
    this.name = "CronError";
  }
}

export type CronFieldName = "minute" | "hour" | "day-of-month" | "month" | "day-of-week";

/** A parsed expression. Each set is indexed by value: `minutes[5]` is true when minute 5 fires. */
export interface CronSchedule {
  /** The expression as given (trimmed). */
  readonly source: string;
  readonly minutes: readonly boolean[];
  readonly hours: readonly boolean[];
  readonly daysOfMonth: readonly boolean[];
  readonly months: readonly boolean[];
  /** 0 = Sunday .. 6 = Saturday (a 7 in the expression lands on 0). */
  readonly daysOfWeek: readonly boolean[];
  /** Whether the day-of-month text does not start with `*`. */
  readonly domRestricted: boolean;
  /** Whether the day-of-week text does not start with `*`. */
  readonly dowRestricted: boolean;
}

interface FieldSpec {
  name: CronFieldName;
  min: number;
  max: number;
  names?: readonly string[];
  /** Value of names[0]. */
  namesFrom?: number;
}

const MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: readonly FieldSpec[] = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day-of-month", min: 1, max: 31 },
  { name: "month", min: 1, max: 12, names: MONTH_NAMES, namesFrom: 1 },
  { name: "day-of-week", min: 0, max: 7, names: DAY_NAMES, namesFrom: 0 },
];

const MACROS: Record<string, string> = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};

/** The most days each month can have (February in a leap year). */
const MONTH_MAX_DAYS = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Parses a cron expression; throws CronError saying which field is wrong and why. */
export function parseCron(expression: string): CronSchedule {
  if (typeof expression !== "string") throw new CronError(String(expression), "not a string");
  const source = expression.trim();
  if (source === "") throw new CronError(source, "empty expression");
  let text = source;
  if (source.startsWith("@")) {
    const macro = MACROS[source.toLowerCase()];
    if (!macro)
      throw new CronError(source, `unknown macro ${source} (known: ${Object.keys(MACROS).join(" ")})`);
    text = macro;
  }
  const parts = text.split(/\s+/);
  if (parts.length !== 5) {
    const extra = parts.length > 5 ? "; seconds and years fields are not supported" : "";
    throw new CronError(
      source,
      `expected 5 fields (minute hour day-of-month month day-of-week), got ${parts.length}${extra}`,
    );
  }
  const [minutes, hours, daysOfMonth, months, rawDays] = FIELDS.map((f, i) =>
    parseField(source, f, parts[i] as string),
  ) as [boolean[], boolean[], boolean[], boolean[], boolean[]];
  const daysOfWeek = rawDays.slice(0, 7);
  if (rawDays[7]) daysOfWeek[0] = true;
  const schedule: CronSchedule = {
    source,
    minutes,
    hours,
    daysOfMonth,
    months,
    daysOfWeek,
    domRestricted: !(parts[2] as string).startsWith("*"),
    dowRestricted: !(parts[4] as string).startsWith("*"),
  };
  // With the day-of-week unrestricted only day-of-month picks days; a day
  // that no selected month has (30 February) would never fire.
  if (schedule.domRestricted && !schedule.dowRestricted) {
    const possible = months.some(
      (on, m) => on && daysOfMonth.some((d, day) => d && day <= (MONTH_MAX_DAYS[m] ?? 0)),
    );
    if (!possible)
      throw new CronError(
        source,
        `day-of-month field "${parts[2]}": no selected month has such a day, so it would never fire`,
        "day-of-month",
      );
  }
  return schedule;
}

function parseField(expression: string, f: FieldSpec, text: string): boolean[] {
  const fail = (reason: string): never => {
    throw new CronError(expression, `${f.name} field "${text}": ${reason}`, f.name);
  };
  const set: boolean[] = new Array(f.max + 1).fill(false);
  for (const item of text.split(",")) {
    if (item === "") fail("empty list item");
    const slash = item.split("/");
    if (slash.length > 2) fail(`"${item}" has more than one /`);
    const [range, stepText] = slash as [string, string | undefined];
    let step = 1;
    if (stepText !== undefined) {
      if (!/^\d+$/.test(stepText)) fail(`step "${stepText}" is not a whole number`);
      step = Number(stepText);
      if (step === 0) fail("step 0 is not allowed");
    }
    // 7 is only another name for Sunday: `*` and `A/S` stop at Saturday.
    const top = f.name === "day-of-week" ? 6 : f.max;
    let lo: number;
    let hi: number;
    if (range === "*") {
      lo = f.min;
      hi = top;
    } else {
      const dash = range.split("-");
      if (dash.length > 2) fail(`"${range}" is not a value or a range A-B`);
      lo = value(f, dash[0] as string, fail);
      if (dash.length === 2) {
        hi = value(f, dash[1] as string, fail);
        if (hi < lo) fail(`range ${range} runs backwards (${lo} > ${hi})`);
      } else {
        // `A/S` means from A up to the field's maximum, every S.
        hi = stepText === undefined ? lo : Math.max(lo, top);
      }
    }
    for (let v = lo; v <= hi; v += step) set[v] = true;
  }
  return set;
}

function value(f: FieldSpec, text: string, fail: (reason: string) => never): number {
  if (text === "") return fail("missing number");
  if (/^\d+$/.test(text)) {
    const n = Number(text);
    if (n < f.min || n > f.max) fail(`${text} is out of range ${f.min}-${f.max}`);
    return n;
  }
  const i = f.names?.indexOf(text.toUpperCase()) ?? -1;
  if (i >= 0) return i + (f.namesFrom ?? 0);
  const known = f.names ? ` or a name ${f.names[0]}..${f.names[f.names.length - 1]}` : "";
  return fail(`"${text}" is not a number${known}`);
}

/** croner's schedule for a parsed expression, made once per CronSchedule. */
const crons = new WeakMap<CronSchedule, Cron>();

const list = (set: readonly boolean[]) => set.flatMap((on, v) => (on ? [v] : [])).join(",");

function cronOf(s: CronSchedule): Cron {
  let c = crons.get(s);
  if (!c) {
    // Explicit lists, never `*`: croner's OR rule would read a bare `*` as unrestricted, and which
    // day rule applies is decided here, from the expression's text.
    const pattern = [s.minutes, s.hours, s.daysOfMonth, s.months, s.daysOfWeek].map(list).join(" ");
    c = new Cron(pattern, {
      timezone: "UTC",
      mode: "5-part",
      domAndDow: !(s.domRestricted && s.dowRestricted),
    });
    crons.set(s, c);
  }
  return c;
}

/** The first fire time strictly after `after` (whole minutes, UTC). */
export function nextFire(s: CronSchedule, after: Date): Date {
  const next = cronOf(s).nextRun(after);
  if (!next) throw new CronError(s.source, `no fire time found after ${after.toISOString()}`);
  return next;
}

/** The last fire time strictly before `before` (whole minutes, UTC). */
export function previousFire(s: CronSchedule, before: Date): Date {
  const [previous] = cronOf(s).previousRuns(1, before);
  if (!previous) throw new CronError(s.source, `no fire time found before ${before.toISOString()}`);
  return previous;
}
