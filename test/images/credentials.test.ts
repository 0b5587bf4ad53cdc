import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveRegistryCredentials } from "../../agent/images/index.ts";
import { BerthError } from "../../shared/errors.ts";

const rejectsWith = (fn: () => unknown, code: string, ...mentions: string[]) => {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof BerthError, `expected BerthError, got ${String(e)}`);
    assert.equal(e.code, code);
    for (const m of mentions) assert.ok(e.message.includes(m), `"${e.message}" should mention ${m}`);
    return true;
  });
};

test("no credentials in any form means anonymous", () => {
  assert.equal(resolveRegistryCredentials(undefined, {}), undefined);
  assert.equal(resolveRegistryCredentials(null, {}), undefined);
  assert.equal(resolveRegistryCredentials([], {}), undefined);
  assert.equal(resolveRegistryCredentials({}, {}), undefined);
});

test("dict form: Docker Hub, generic, GCP and NGC variable sets", () => {
  assert.deepEqual(resolveRegistryCredentials({ DOCKERHUB_USERNAME: "al", DOCKERHUB_PASSWORD: "pw1" }, {}), {
    kind: "basic",
    username: "al",
    password: "pw1",
    source: "dockerhub",
  });
  assert.deepEqual(resolveRegistryCredentials({ REGISTRY_USERNAME: "bo", REGISTRY_PASSWORD: "pw2" }, {}), {
    kind: "basic",
    username: "bo",
    password: "pw2",
    source: "generic",
  });
  assert.deepEqual(resolveRegistryCredentials({ GCP_ACCESS_TOKEN: "ya29.tok" }, {}), {
    kind: "basic",
    username: "oauth2accesstoken",
    password: "ya29.tok",
    source: "gcp",
  });
  assert.deepEqual(resolveRegistryCredentials({ NGC_API_KEY: "nvapi-1" }, {}), {
    kind: "basic",
    username: "$oauthtoken",
    password: "nvapi-1",
    source: "ngc",
  });
  assert.deepEqual(resolveRegistryCredentials({ AWS_ECR_PASSWORD: "ecrpw" }, {}), {
    kind: "basic",
    username: "AWS",
    password: "ecrpw",
    source: "aws-ecr-password",
  });
});

test("dict form values are used as given, not looked up in env", () => {
  const creds = resolveRegistryCredentials(
    { REGISTRY_USERNAME: "from-dict", REGISTRY_PASSWORD: "dict-pw" },
    { REGISTRY_USERNAME: "from-env", REGISTRY_PASSWORD: "env-pw" },
  );
  assert.equal(creds?.kind, "basic");
  assert.equal(creds?.kind === "basic" && creds.username, "from-dict");
});

test("list form looks names up in env", () => {
  const env = { DOCKERHUB_USERNAME: "cy", DOCKERHUB_PASSWORD: "pw3", UNRELATED: "x" };
  assert.deepEqual(resolveRegistryCredentials(["DOCKERHUB_USERNAME", "DOCKERHUB_PASSWORD"], env), {
    kind: "basic",
    username: "cy",
    password: "pw3",
    source: "dockerhub",
  });
  assert.deepEqual(resolveRegistryCredentials(["NGC_API_KEY"], { NGC_API_KEY: "k" })?.kind, "basic");
});

test("AWS keys give ECR keys to exchange, session token optional", () => {
  const env = { AWS_ACCESS_KEY_ID: "AKIA1", AWS_SECRET_ACCESS_KEY: "s3cr3t", AWS_REGION: "us-east-1" };
  assert.deepEqual(resolveRegistryCredentials(Object.keys(env), env), {
    kind: "aws-ecr",
    accessKeyId: "AKIA1",
    secretAccessKey: "s3cr3t",
    region: "us-east-1",
  });
  const withToken = resolveRegistryCredentials({ ...env, AWS_SESSION_TOKEN: "tok" }, {});
  assert.equal(withToken?.kind === "aws-ecr" && withToken.sessionToken, "tok");
});

test("list form names every unset variable, and never a value", () => {
  rejectsWith(
    () => resolveRegistryCredentials(["REGISTRY_USERNAME", "REGISTRY_PASSWORD"], { REGISTRY_USERNAME: "u" }),
    "invalid_request",
    "REGISTRY_PASSWORD",
  );
  rejectsWith(
    () => resolveRegistryCredentials(["DOCKERHUB_USERNAME", "DOCKERHUB_PASSWORD"], {}),
    "invalid_request",
    "DOCKERHUB_USERNAME",
    "DOCKERHUB_PASSWORD",
  );
});

test("an incomplete set names what is missing", () => {
  rejectsWith(
    () => resolveRegistryCredentials({ DOCKERHUB_USERNAME: "u" }, {}),
    "invalid_request",
    "Docker Hub",
    "DOCKERHUB_PASSWORD",
  );
  rejectsWith(
    () => resolveRegistryCredentials({ AWS_ACCESS_KEY_ID: "a", AWS_SECRET_ACCESS_KEY: "b" }, {}),
    "invalid_request",
    "AWS_REGION",
  );
  rejectsWith(
    () => resolveRegistryCredentials({ REGISTRY_USERNAME: "u", REGISTRY_PASSWORD: "" }, {}),
    "invalid_request",
    "REGISTRY_PASSWORD",
  );
});

test("unrecognised variables are refused with the recognised sets listed", () => {
  assert.throws(
    () => resolveRegistryCredentials({ MY_TOKEN: "very-secret-value" }, {}),
    (e: unknown) =>
      e instanceof BerthError &&
      e.code === "invalid_request" &&
      e.message.includes("MY_TOKEN") &&
      e.message.includes("NGC_API_KEY") &&
      !e.message.includes("very-secret-value"),
  );
  assert.throws(() => resolveRegistryCredentials("REGISTRY_USERNAME" as unknown as string[], {}), BerthError);
  assert.throws(
    () => resolveRegistryCredentials({ REGISTRY_USERNAME: 3 } as unknown as Record<string, string>, {}),
    BerthError,
  );
});
