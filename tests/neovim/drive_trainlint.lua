-- Drives `trainlint lsp` from Neovim's built-in LSP client, headless, and writes what the editor
-- shows to the JSON file named by $TRAINLINT_NVIM_OUT. Started as:
--   nvim --headless --clean -c "luafile drive_trainlint.lua" train.py
local out = {}
local python = os.getenv("TRAINLINT_PYTHON")
local client_id = vim.lsp.start_client({
  name = "trainlint",
  cmd = { python, "-m", "trainlint", "lsp" },
  root_dir = vim.fn.getcwd(),
})
vim.lsp.buf_attach_client(0, client_id)

local function wait_for(predicate)
  return vim.wait(15000, predicate, 50)
end

local function shown()
  local rows = {}
  for _, d in ipairs(vim.diagnostic.get(0)) do
    local code = d.user_data and d.user_data.lsp and d.user_data.lsp.code or d.code
    table.insert(rows, { lnum = d.lnum, col = d.col, severity = d.severity, source = d.source, code = code, message = d.message })
  end
  return rows
end

-- 1. open: the finding appears
wait_for(function() return #vim.diagnostic.get(0) > 0 end)
out.on_open = shown()

-- 2. hover on the finding
local params = { textDocument = vim.lsp.util.make_text_document_params(), position = { line = 9, character = 12 } }
local hover = vim.lsp.buf_request_sync(0, "textDocument/hover", params, 10000)
for _, response in pairs(hover or {}) do
  if response.result then out.hover = response.result.contents.value end
end

-- 3. code action: apply the safe fix as the editor would, and the finding goes away
local diagnostics = vim.lsp.diagnostic.get_line_diagnostics(0, 9)
local action_params = {
  textDocument = vim.lsp.util.make_text_document_params(),
  range = { start = { line = 9, character = 4 }, ["end"] = { line = 9, character = 24 } },
  context = { diagnostics = diagnostics },
}
local actions = vim.lsp.buf_request_sync(0, "textDocument/codeAction", action_params, 10000)
out.actions = {}
for _, response in pairs(actions or {}) do
  for _, action in ipairs(response.result or {}) do
    table.insert(out.actions, action.title)
    if action.isPreferred then vim.lsp.util.apply_workspace_edit(action.edit, "utf-16") end
  end
end
out.fixed_line = vim.api.nvim_buf_get_lines(0, 9, 10, false)[1]
wait_for(function() return #vim.diagnostic.get(0) == 0 end)
out.after_fix = shown()

-- 4. typing a syntax error: the server reports it and stays up; removing it recovers
vim.api.nvim_buf_set_lines(0, 10, 10, false, { "for broken in (:" })
wait_for(function()
  for _, d in ipairs(vim.diagnostic.get(0)) do
    if d.message:find("syntax error", 1, true) then return true end
  end
  return false
end)
out.mid_edit = shown()
vim.api.nvim_buf_set_lines(0, 10, 11, false, {})
wait_for(function() return #vim.diagnostic.get(0) == 0 end)
out.recovered = shown()
out.server_alive = not vim.lsp.get_client_by_id(client_id).is_stopped()

-- 5. save, then close the buffer
vim.cmd("write")
vim.wait(500)
out.after_save = shown()

local file = io.open(os.getenv("TRAINLINT_NVIM_OUT"), "w")
file:write(vim.fn.json_encode(out))
file:close()
vim.lsp.stop_client(client_id)
vim.cmd("qa!")
