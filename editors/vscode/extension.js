// trainlint in VS Code: a language client that starts `trainlint lsp` for Python files and Jupyter
// notebooks, and passes the `trainlint.*` settings to it.
"use strict";

const path = require("path");
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

/** The settings the server reads (see trainlint/lsp/options.py), as initializationOptions. */
function serverSettings() {
  const config = vscode.workspace.getConfiguration("trainlint");
  return {
    select: config.get("select"),
    ignore: config.get("ignore"),
    preview: config.get("preview"),
    configPath: config.get("configPath") || null,
  };
}

/** The command to run: `trainlint.path`, a relative path taken from the first workspace folder. */
function serverCommand() {
  const command = vscode.workspace.getConfiguration("trainlint").get("path") || "trainlint";
  const folder = vscode.workspace.workspaceFolders && vscode.workspace.workspaceFolders[0];
  if (folder && !path.isAbsolute(command) && command.includes("/")) {
    return path.join(folder.uri.fsPath, command);
  }
  return command;
}

async function start(context) {
  const output = vscode.window.createOutputChannel("trainlint");
  context.subscriptions.push(output);
  client = new LanguageClient(
    "trainlint",
    "trainlint",
    { command: serverCommand(), args: ["lsp"] },
    {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
        { notebook: "jupyter-notebook", language: "python" },
      ],
      initializationOptions: serverSettings(),
      // pushes `{trainlint: {...}}` as workspace/didChangeConfiguration whenever a setting changes
      synchronize: { configurationSection: "trainlint" },
      outputChannel: output,
    },
  );
  await client.start();
}

async function activate(context) {
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration("trainlint.path")) {
        // a different executable: start it afresh (the other settings travel without a restart)
        await deactivate();
        await start(context);
      }
    }),
  );
  await start(context);
}

async function deactivate() {
  if (client) {
    const stopping = client;
    client = undefined;
    await stopping.stop();
  }
}

module.exports = { activate, deactivate };
