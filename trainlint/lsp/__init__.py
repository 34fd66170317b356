"""The language server (`trainlint lsp`); needs the `lsp` extra (pygls, lsprotocol)."""
