import { Command, CommanderError } from "commander";
import { describeError } from "../shared/errors.ts";
import { BERTH_VERSION } from "../shared/version.ts";
import { adminCommands } from "./commands/admin.ts";
import { agentCommands } from "./commands/agent.ts";
import { agentJoinCommand } from "./commands/agent-join.ts";
import { agentUninstallCommand } from "./commands/agent-uninstall.ts";
import { configureCommand } from "./commands/configure.ts";
import { loginCommand, logoutCommand } from "./commands/login.ts";
import { coordinatorCommand } from "./commands/coordinator.ts";
import { dbCommands } from "./commands/db.ts";
import { deployCommand } from "./commands/deploy.ts";
import { deploymentCommands } from "./commands/deployment.ts";
import { doctorCommand } from "./commands/doctor.ts";
import { imageCommands } from "./commands/image.ts";
import { logsCommand } from "./commands/logs.ts";
import { secretCommands } from "./commands/secret.ts";
import { stateCommands } from "./commands/state.ts";
import { serveCommand } from "./commands/serve.ts";
import { shellCommand } from "./commands/shell.ts";
import { stackCommands } from "./commands/stack.ts";
import { taskCommands } from "./commands/task.ts";
import { upCommand } from "./commands/up.ts";
import { usageCommand } from "./commands/usage.ts";
import { volumeCommands } from "./commands/volume.ts";
import { auditCommand, workspaceCommands } from "./commands/workspace.ts";

export function buildProgram(): Command {
  const program = new Command("berth")
    .description("berth: serverless compute on your own GPU fleet")
    .version(BERTH_VERSION)
    .exitOverride()
    .showHelpAfterError();
  upCommand(program);
  coordinatorCommand(program);
  agentCommands(program);
  // `berth agent join` goes on the command agentCommands made: `berth agent`'s flags are join's too.
  agentJoinCommand(program.commands.find((c) => c.name() === "agent")!);
  agentUninstallCommand(program.commands.find((c) => c.name() === "agent")!);
  configureCommand(program);
  loginCommand(program);
  logoutCommand(program);
  workspaceCommands(program);
  auditCommand(program);
  usageCommand(program);
  taskCommands(program);
  secretCommands(program);
  dbCommands(program);
  stateCommands(program);
  volumeCommands(program);
  imageCommands(program);
  deployCommand(program);
  deploymentCommands(program);
  stackCommands(program);
  serveCommand(program);
  shellCommand(program);
  logsCommand(program);
  doctorCommand(program);
  adminCommands(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      process.exitCode = e.exitCode;
      return;
    }
    process.stderr.write(`berth: ${describeError(e)}\n`);
    process.exitCode = 1;
  }
}

// Run from the sources (`node --import tsx cli/main.ts ...`); the bundle's entry is cli/bundle-entry.ts,
// and in the bundle this code may share a file with it, so only a .ts file counts.
if (import.meta.url.endsWith(".ts") && import.meta.url === `file://${process.argv[1]}`) {
  await main(process.argv);
}
