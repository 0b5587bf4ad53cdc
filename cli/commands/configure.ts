import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { configPath, currentCredentials, DEFAULT_URL, saveProfile } from "../config.ts";

export function configureCommand(program: Command): void {
  program
    .command("configure")
    .description("save a coordinator URL and token as a named profile in ~/.berth/config.json")
    .argument("<profile>", "profile name; `default` is used unless BERTH_PROFILE names another")
    .requiredOption("--token <token>", "workspace token")
    .option("--url <url>", "coordinator URL", DEFAULT_URL)
    .action((profile: string, opts: { token: string; url: string }) => {
      saveProfile(profile, { token: opts.token, url: opts.url.replace(/\/+$/, "") });
      process.stdout.write(`saved profile ${profile} (${opts.url}) to ${configPath()}\n`);
    });

  program
    .command("env")
    .description(
      'print the coordinator URL and token in effect as shell variables (BERTH_URL, SERVICE_TOKEN): eval "$(berth env)"',
    )
    .action(() => {
      const c = currentCredentials();
      if (!c.token) {
        throw new BerthError(
          "unauthenticated",
          `profile ${c.profile} has no token: run \`berth up\`, or \`berth configure ${c.profile} --token TOKEN --url URL\``,
        );
      }
      process.stdout.write(
        `export BERTH_URL=${shellQuote(c.url)}\nexport SERVICE_TOKEN=${shellQuote(c.token)}\n`,
      );
    });
}

/** A single-quoted shell word: nothing inside is expanded. */
function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}
