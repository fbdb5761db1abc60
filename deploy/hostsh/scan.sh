# shellcheck shell=sh
# Prints every run's state lines (deploy.statedir.layout.parse_scan reads them): the one shell
# that reads journals; the lock's exec (lock.sh) and `deploy status` (status.sh) both run it.
# Input: _dS, state_dir. One awk for all journals however many runs are kept.
#
# Output: RUN<tab><journal path> for every journal, then per file L<tab><n><tab><line> for
# each state line (deploy.statedir.layout.STATE_EVENTS, listed in the awk pattern) and
# N<tab><lines> at its end. A run whose directory or journal is a symbolic link is not read
# (it was planted: nothing of ours makes links there; trust.sh checks state_dir itself).

set --
for _dj in "$_dS"/runs/*/journal.jsonl; do
  [ -h "$_dj" ] || [ -h "${_dj%/journal.jsonl}" ] || set -- "$@" "$_dj"
done
[ -f "$1" ] && { printf 'RUN\t%s\n' "$@"; awk -v OFS='\t' 'FNR==1 && NR>1 {print "N", n} FNR==1 {print "F", FILENAME} {n=FNR} /"event": ?"(begin|end|rollback_begin|rollback_end|rollback_failed|resolved)"/ {print "L", FNR, $0} END {if (NR) print "N", n}' "$@"; }
