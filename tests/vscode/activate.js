// Activate the packaged extension with VS Code's API stubbed, and print what it asked of the language
// client: the server command, the document selector and the settings it sends.
//   node activate.js EXTENSION_DIR SETTINGS_JSON WORKSPACE_FOLDER
"use strict";

const Module = require("module");
const path = require("path");

const [extensionDir, settingsJson, folder] = process.argv.slice(2);
const settings = JSON.parse(settingsJson); // what getConfiguration("trainlint") answers, defaults included
const clients = [];

const vscode = {
  workspace: {
    getConfiguration: (section) => ({ get: (key) => (section === "trainlint" ? settings[key] : undefined) }),
    workspaceFolders: [{ uri: { fsPath: folder } }],
    onDidChangeConfiguration: () => ({ dispose() {} }),
  },
  window: { createOutputChannel: (name) => ({ name, dispose() {} }) },
};

class LanguageClient {
  constructor(id, name, serverOptions, clientOptions) {
    this.record = { id, name, serverOptions, clientOptions: { ...clientOptions, outputChannel: undefined } };
  }
  async start() {
    clients.push(this.record);
  }
  async stop() {}
}

const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === "vscode") return vscode;
  if (request === "vscode-languageclient/node") return { LanguageClient };
  return load.call(this, request, ...rest);
};

// the language client the extension requires must resolve inside the package itself
const bundled = require.resolve("vscode-languageclient/node", { paths: [extensionDir] });
const extension = require(path.join(extensionDir, "extension.js"));
extension.activate({ subscriptions: [] }).then(() => {
  process.stdout.write(JSON.stringify({ bundled: path.relative(extensionDir, bundled), clients }));
});
