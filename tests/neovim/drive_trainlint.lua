-- Drives `trainlint lsp` through Neovim's built-in LSP client, headless, after the README's
-- configuration (loaded as init.lua) has started it, and writes what the editor shows to the JSON
-- file named by $TRAINLINT_NVIM_OUT. Written against the API common to Neovim 0.7 and later.
-- Started as:  nvim --headless -u readme_snippet.lua train.py -c "luafile drive_trainlint.lua"
local out = {}

local function wait_for(predicate)
  return vim.wait(20000, predicate, 50)
end

local function clients()
  if vim.lsp.get_clients then return vim.lsp.get_clients({ bufnr = 0 }) end
  local list = {}
  for _, client in pairs(vim.lsp.buf_get_clients(0)) do table.insert(list, client) end
  return list
end

local function shown()
  local rows = {}
  for _, d in ipairs(vim.diagnostic.get(0)) do
    local code = d.user_data and d.user_data.lsp and d.user_data.lsp.code or d.code
    table.insert(rows, { lnum = d.lnum, col = d.col, severity = d.severity, source = d.source, code = code, message = d.message })
  end
  return rows
end

local function request(method, params)
  local results = {}
  for _, response in pairs(vim.lsp.buf_request_sync(0, method, params, 15000) or {}) do
    if response.result then table.insert(results, response.result) end
  end
  return results
end

-- 0. the configuration started the server for this Python buffer
wait_for(function() return #clients() > 0 end)
out.clients = {}
for _, client in ipairs(clients()) do table.insert(out.clients, client.name) end

-- 1. open: the finding appears
wait_for(function() return #vim.diagnostic.get(0) > 0 end)
out.on_open = shown()

-- 2. hover on the finding
local position = { line = 9, character = 12 }
for _, result in ipairs(request("textDocument/hover", { textDocument = vim.lsp.util.make_text_document_params(), position = position })) do
  out.hover = result.contents.value
end

-- 3. code actions with the cursor at the start of the line, outside the finding's span: apply
--    the preferred fix as the editor would, and the finding goes away
local line_start = { line = 9, character = 0 }
local params = {
  textDocument = vim.lsp.util.make_text_document_params(),
  range = { start = line_start, ["end"] = line_start },
  context = { diagnostics = {} },
}
out.actions = {}
for _, result in ipairs(request("textDocument/codeAction", params)) do
  for _, action in ipairs(result) do
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
local client = clients()[1]
out.server_alive = client ~= nil and not client:is_stopped()

-- 5. save
vim.cmd("write")
vim.wait(500)
out.after_save = shown()

local file = io.open(os.getenv("TRAINLINT_NVIM_OUT"), "w")
file:write(vim.fn.json_encode(out))
file:close()
for _, c in ipairs(clients()) do vim.lsp.stop_client(c.id) end
vim.cmd("qa!")
