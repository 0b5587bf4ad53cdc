// Egress policy validation (spec, Errors §5). Pure logic: no root needed.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  egressPolicyToRequest,
  parseCidr,
  resolveEgressPolicy,
  validateEgressPolicy,
} from "../../shared/egress.ts";

const invalidWith = (re: RegExp) => (e: unknown) => {
  const err = e as { code?: string; message?: string };
  assert.equal(err.code, "invalid_request");
  assert.match(err.message ?? "", re);
  return true;
};

test("open, block and allow from the public fields", () => {
  assert.deepEqual(resolveEgressPolicy({}), { mode: "open" });
  assert.deepEqual(resolveEgressPolicy({ block_network: false, allow_list: [] }), { mode: "open" });
  assert.deepEqual(resolveEgressPolicy({ block_network: false, allow_list: null }), { mode: "open" });
  assert.deepEqual(resolveEgressPolicy({ block_network: true }), { mode: "block" });
  assert.deepEqual(resolveEgressPolicy({ block_network: true, allow_list: [] }), { mode: "block" });
  assert.deepEqual(resolveEgressPolicy({ allow_list: ["10.1.2.3/32", "2001:db8::/32"] }), {
    mode: "allow",
    cidrs: ["10.1.2.3/32", "2001:db8::/32"],
  });
});

test("block_network together with a non-empty allow_list is invalid", () => {
  assert.throws(
    () => resolveEgressPolicy({ block_network: true, allow_list: ["10.0.0.0/8"] }),
    invalidWith(/block_network cannot be combined with a non-empty allow_list/),
  );
});

test("more than 10 entries is invalid; exactly 10 is fine", () => {
  const ten = Array.from({ length: 10 }, (_, i) => `10.${i}.0.0/16`);
  assert.equal((resolveEgressPolicy({ allow_list: ten }) as { cidrs: string[] }).cidrs.length, 10);
  assert.throws(
    () => resolveEgressPolicy({ allow_list: [...ten, "10.10.0.0/16"] }),
    invalidWith(/11 entries; at most 10/),
  );
});

test("entries that are not CIDRs are rejected, naming the entry and the rule", () => {
  const cases: [unknown, RegExp][] = [
    ["10.0.0.0", /"10\.0\.0\.0" is not in CIDR notation: expected address\/prefix/],
    ["10.0.0.0/33", /"10\.0\.0\.0\/33" has an invalid prefix length "33": must be 0\.\.32/],
    ["2001:db8::/129", /invalid prefix length "129": must be 0\.\.128/],
    ["10.0.0.0/", /invalid prefix length ""/],
    ["10.0.0.0/-1", /invalid prefix length "-1"/],
    ["10.0.0.0/8/8", /invalid prefix length "8\/8"/],
    ["example.com/32", /"example\.com" is not an IPv4 or IPv6 address/],
    ["256.0.0.0/8", /"256\.0\.0\.0" is not an IPv4 or IPv6 address/],
    ["010.0.0.0/8", /"010\.0\.0\.0" is not an IPv4 or IPv6 address/],
    ["fe80::1%eth0/64", /not an IPv4 or IPv6 address/],
    ["", /not in CIDR notation/],
    [42, /42 is not a string/],
  ];
  for (const [entry, re] of cases) {
    assert.throws(
      () => resolveEgressPolicy({ allow_list: ["10.0.0.0/8", entry as string] }),
      invalidWith(re),
    );
  }
});

test("entries are normalised: host bits cleared, IPv6 canonical, duplicates dropped", () => {
  assert.deepEqual(resolveEgressPolicy({ allow_list: ["10.1.2.3/8", "10.0.0.0/8", "2001:DB8:0:0::1/32"] }), {
    mode: "allow",
    cidrs: ["10.0.0.0/8", "2001:db8::/32"],
  });
  assert.equal(parseCidr("0.0.0.0/0").text, "0.0.0.0/0");
  assert.equal(parseCidr("::/0").text, "::/0");
  assert.equal(parseCidr("::ffff:1.2.3.4/128").text, "::ffff:102:304/128");
  assert.equal(parseCidr("2001:db8:0:1:0:0:0:1/128").text, "2001:db8:0:1::1/128");
  assert.equal(parseCidr("2001:0:0:1:0:0:0:1/128").text, "2001:0:0:1::1/128");
  assert.equal(parseCidr("2001:db8:0:0:1:0:0:1/128").text, "2001:db8::1:0:0:1/128");
  assert.equal(parseCidr("1:0:1:0:1:0:1:0/128").text, "1:0:1:0:1:0:1:0/128");
});

test("bad field types are rejected", () => {
  assert.throws(
    () => resolveEgressPolicy({ block_network: "yes" as never }),
    invalidWith(/block_network must be a boolean/),
  );
  assert.throws(
    () => resolveEgressPolicy({ allow_list: "10.0.0.0/8" as never }),
    invalidWith(/allow_list must be a list/),
  );
});

test("validateEgressPolicy checks policies built elsewhere; round trip to the public fields", () => {
  assert.deepEqual(validateEgressPolicy({ mode: "allow", cidrs: ["10.9.9.9/16"] }), {
    mode: "allow",
    cidrs: ["10.9.0.0/16"],
  });
  assert.throws(() => validateEgressPolicy({ mode: "allow", cidrs: [] }), invalidWith(/non-empty list/));
  assert.throws(
    () => validateEgressPolicy({ mode: "nope" } as never),
    invalidWith(/not one of open, block, allow/),
  );
  assert.throws(
    () => validateEgressPolicy({ mode: "allow", cidrs: ["x"] }),
    invalidWith(/"x" is not in CIDR notation/),
  );
  for (const req of [{ block_network: true }, { allow_list: ["10.0.0.0/8"] }, {}]) {
    const policy = resolveEgressPolicy(req);
    assert.deepEqual(resolveEgressPolicy(egressPolicyToRequest(policy)), policy);
  }
});
