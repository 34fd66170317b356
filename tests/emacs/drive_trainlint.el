;;; drive_trainlint.el --- drive trainlint's language server through eglot, as an Emacs user would  -*- lexical-binding: t -*-

;; Loaded after the README's configuration, with the training file visited. It records what eglot
;; receives and what flymake shows: the findings on open, after an edit that fixes them, and after
;; an edit that breaks the syntax; then writes them as JSON to $TRAINLINT_EMACS_OUT and exits.

(require 'json)
(require 'cl-lib)

(defvar trainlint-received nil "Each publishDiagnostics eglot received, newest first.")

(advice-add 'eglot-handle-notification :before
            (lambda (_server method &rest params)
              (when (eq method 'textDocument/publishDiagnostics)
                (push params trainlint-received))))

(defun trainlint-wait (predicate &optional seconds)
  "Let Emacs read its processes until PREDICATE holds or SECONDS (default 60) pass."
  (let ((deadline (+ (float-time) (or seconds 60))))
    (while (and (not (funcall predicate)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (funcall predicate)))

(defun trainlint-shown ()
  "What flymake shows in this buffer: line (1-based), column (0-based), message."
  (mapcar (lambda (d)
            (save-excursion
              (goto-char (flymake-diagnostic-beg d))
              (list :line (line-number-at-pos) :column (current-column)
                    :type (symbol-name (flymake-diagnostic-type d))
                    :text (flymake-diagnostic-text d))))
          (sort (flymake-diagnostics) (lambda (a b) (< (flymake-diagnostic-beg a) (flymake-diagnostic-beg b))))))

(defun trainlint-settle (count)
  "Wait for the COUNT-th publishDiagnostics, then for flymake to show it."
  (trainlint-wait (lambda () (>= (length trainlint-received) count)))
  (flymake-start)
  (trainlint-wait (lambda () nil) 0.5))

(let ((out (getenv "TRAINLINT_EMACS_OUT"))
      (buffer (current-buffer))
      report)
  (with-current-buffer buffer
    ;; eglot-ensure connects from the command loop (post-command-hook), which batch mode never runs
    (run-hooks 'post-command-hook)
    (trainlint-wait (lambda () (eglot-current-server)))
    (trainlint-settle 1)
    (setq report (list :managed (if (bound-and-true-p eglot--managed-mode) t :json-false)
                       :server (let ((server (eglot-current-server)))
                                 (if server (plist-get (eglot--server-info server) :name) :json-null))
                       :received_on_open (length (plist-get (car trainlint-received) :diagnostics))
                       :on_open (vconcat (trainlint-shown))))
    ;; fix the finding by hand, unsaved: didChange
    (goto-char (point-min))
    (search-forward "history.append(loss)")
    (replace-match "history.append(loss.detach())" t t)
    (eglot--signal-textDocument/didChange)
    (trainlint-settle 2)
    (setq report (append report (list :after_edit (vconcat (trainlint-shown)))))
    ;; break the syntax mid-edit
    (goto-char (point-max))
    (insert "for broken in (:\n")
    (eglot--signal-textDocument/didChange)
    (trainlint-settle 3)
    (setq report (append report (list :mid_edit (vconcat (trainlint-shown)))))
    (setq report (append report (list :server_alive (if (jsonrpc-running-p (eglot-current-server)) t :json-false))))
    (ignore-errors (eglot-shutdown (eglot-current-server))))
  (with-temp-file out (insert (json-encode report)))
  (kill-emacs 0))
