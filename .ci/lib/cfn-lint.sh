# shellcheck shell=bash
# cfn-lint over template.yaml, for .ci/run. Sourced, never executed.
#
# cfn-lint (1.51.0 here, with aws-sam-translator for the SAM transform) comes
# installed on the project's CI machines (pip). Informational checks are
# included (--include-checks I: I3011, the deletion policies of stateful
# resources, is one), and any finding fails the step, whatever its level:
# cfn-lint exits non-zero for errors, warnings and informational findings
# alike. Where cfn-lint is absent the step is skipped with a message saying
# so, never silently.

# cfn_lint_template lints template.yaml, or says why it cannot. pip puts
# cfn-lint where a bare CI environment's PATH may not look (pyenv's shims,
# ~/.local/bin), so those are tried too, as ci_ensure_go does for go.
cfn_lint_template() {
	local d
	if ! command -v cfn-lint >/dev/null; then
		for d in "${PYENV_ROOT:-$HOME/.pyenv}/shims" "$HOME/.local/bin"; do
			if [[ -x $d/cfn-lint ]]; then
				export PATH=$PATH:$d
				break
			fi
		done
	fi
	if ! command -v cfn-lint >/dev/null; then
		ci_log "cfn-lint: SKIPPED, template.yaml NOT linted: cfn-lint is not installed on this machine (pip install cfn-lint aws-sam-translator)"
		return 0
	fi
	local py
	py=$(dirname "$(command -v cfn-lint)")/python3 # the interpreter pip installed it for
	[[ -x $py ]] || py=python3
	ci_log "$(cfn-lint --version) (aws-sam-translator $("$py" -c 'import samtranslator; print(samtranslator.__version__)' 2>/dev/null || echo '?'))"
	local rc=0
	cfn-lint --include-checks I -- template.yaml || rc=$?
	if ((rc != 0)); then
		ci_die "cfn-lint: template.yaml has findings (exit $rc, listed above); informational ones count too"
	fi
	ci_log "cfn-lint: template.yaml has no findings (informational checks included)"
}
