import type { Command } from "commander";
import { configPath, DEFAULT_URL, saveProfile } from "../config.ts";

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
}
