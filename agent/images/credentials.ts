import { BerthError, invalid } from "../../shared/errors.ts";

/** A user name and password (or token) for a registry's basic/bearer login. */
export interface BasicRegistryCredentials {
  kind: "basic";
  username: string;
  password: string;
  /** Which variable set they came from, for logs (never the values). */
  source: "generic" | "dockerhub" | "gcp" | "ngc" | "aws-ecr-password";
}

/**
 * AWS keys for Amazon ECR. ECR does not take the keys themselves: they must be
 * exchanged for a 12-hour password (ecr:GetAuthorizationToken, SigV4-signed).
 */
export interface AwsEcrKeys {
  kind: "aws-ecr";
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  region: string;
}

export type RegistryCredentials = BasicRegistryCredentials | AwsEcrKeys;

/** `base_image_creds` as the SDK sends it: name → value, or names to look up. */
export type BaseImageCreds = Record<string, string> | string[];

interface VariableSet {
  name: string;
  /** Any of these present selects the set. */
  markers: string[];
  required: string[];
  build(v: Record<string, string>): RegistryCredentials;
}

// Order matters: the first set whose markers appear wins, so the specific sets
// come before the generic one.
const VARIABLE_SETS: VariableSet[] = [
  {
    name: "Docker Hub",
    markers: ["DOCKERHUB_USERNAME", "DOCKERHUB_PASSWORD"],
    required: ["DOCKERHUB_USERNAME", "DOCKERHUB_PASSWORD"],
    build: (v) => basic(v.DOCKERHUB_USERNAME!, v.DOCKERHUB_PASSWORD!, "dockerhub"),
  },
  {
    // The output of `aws ecr get-login-password`, for hosts that exchange the
    // keys themselves (user name is always "AWS").
    name: "Amazon ECR password",
    markers: ["AWS_ECR_PASSWORD"],
    required: ["AWS_ECR_PASSWORD"],
    build: (v) => basic("AWS", v.AWS_ECR_PASSWORD!, "aws-ecr-password"),
  },
  {
    name: "Amazon ECR keys",
    markers: ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
    required: ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"],
    build: (v) => ({
      kind: "aws-ecr",
      accessKeyId: v.AWS_ACCESS_KEY_ID!,
      secretAccessKey: v.AWS_SECRET_ACCESS_KEY!,
      ...(v.AWS_SESSION_TOKEN ? { sessionToken: v.AWS_SESSION_TOKEN } : {}),
      region: v.AWS_REGION!,
    }),
  },
  {
    name: "Google Artifact Registry",
    markers: ["GCP_ACCESS_TOKEN"],
    required: ["GCP_ACCESS_TOKEN"],
    build: (v) => basic("oauth2accesstoken", v.GCP_ACCESS_TOKEN!, "gcp"),
  },
  {
    name: "NVIDIA GPU Cloud",
    markers: ["NGC_API_KEY"],
    required: ["NGC_API_KEY"],
    build: (v) => basic("$oauthtoken", v.NGC_API_KEY!, "ngc"),
  },
  {
    name: "generic registry",
    markers: ["REGISTRY_USERNAME", "REGISTRY_PASSWORD"],
    required: ["REGISTRY_USERNAME", "REGISTRY_PASSWORD"],
    build: (v) => basic(v.REGISTRY_USERNAME!, v.REGISTRY_PASSWORD!, "generic"),
  },
];

function basic(username: string, password: string, source: BasicRegistryCredentials["source"]) {
  return { kind: "basic", username, password, source } as const;
}

/** The variable names each recognised set uses, for help text and errors. */
export function recognisedCredentialVariables(): Array<{ name: string; variables: string[] }> {
  return VARIABLE_SETS.map((s) => ({ name: s.name, variables: s.required }));
}

/**
 * Turns `base_image_creds` into registry credentials. The dict form carries
 * the values; the list form names variables looked up in `env` (the agent's or
 * the workspace secrets'). Returns undefined for no credentials. Errors name
 * variables, never values.
 */
export function resolveRegistryCredentials(
  creds: BaseImageCreds | undefined | null,
  env: NodeJS.ProcessEnv,
): RegistryCredentials | undefined {
  if (creds === undefined || creds === null) return undefined;
  const values: Record<string, string> = {};
  if (Array.isArray(creds)) {
    if (creds.length === 0) return undefined;
    const missing: string[] = [];
    for (const name of creds) {
      if (typeof name !== "string" || !name)
        throw invalid("base_image_creds list entries must be variable names");
      const v = env[name];
      if (v === undefined || v === "") missing.push(name);
      else values[name] = v;
    }
    if (missing.length > 0) {
      throw invalid(`base_image_creds names variables that are not set: ${missing.join(", ")}`, { missing });
    }
  } else if (typeof creds === "object") {
    const entries = Object.entries(creds);
    if (entries.length === 0) return undefined;
    const empty: string[] = [];
    for (const [name, v] of entries) {
      if (typeof v !== "string") throw invalid(`base_image_creds value for ${name} must be a string`);
      if (v === "") empty.push(name);
      else values[name] = v;
    }
    if (empty.length > 0) {
      throw invalid(`base_image_creds has empty values for: ${empty.join(", ")}`, { missing: empty });
    }
  } else {
    throw invalid("base_image_creds must be a dict of variable name to value or a list of variable names");
  }

  const names = Object.keys(values);
  const set = VARIABLE_SETS.find((s) => s.markers.some((m) => names.includes(m)));
  if (!set) {
    const known = VARIABLE_SETS.map((s) => `${s.name} (${s.required.join(", ")})`).join("; ");
    throw invalid(
      `base_image_creds has no recognised registry variables (got ${names.join(", ")}); use one of: ${known}`,
    );
  }
  const missing = set.required.filter((n) => !(n in values));
  if (missing.length > 0) {
    throw invalid(`base_image_creds for ${set.name} is missing ${missing.join(", ")}`, { missing });
  }
  return set.build(values);
}

/** Error for hosts that must exchange ECR keys but are not given a way to. */
export function ecrExchangeUnavailable(registry: string): BerthError {
  return new BerthError(
    "failed_precondition",
    `registry ${registry} needs an Amazon ECR token exchange for AWS keys, and this agent has it turned off; ` +
      "pass AWS_ECR_PASSWORD (the output of `aws ecr get-login-password`) instead",
  );
}
