# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# `deploy status` (deploy.engine.status): the lock's holder, whether the kernel holds the lock
# (/proc/locks, matched by the lock file's inode) and every run's state lines (scan.sh),
# without taking the lock. Input: _dS, state_dir.

[ -d "$_dS" ] || { printf "NOSTATE\nEND\n"; exit 0; }
held=0
if [ -f "$_dS/lock" ]; then
  ino=$(stat -c %i "$_dS/lock" 2>/dev/null)
  if [ -r /proc/locks ] && [ -n "$ino" ]; then
    while read -r _ _ _ _ pid dev _; do
      case "$dev" in *:"$ino") held=$pid ;; esac
    done < /proc/locks
  else
    held=unknown
  fi
fi
printf 'LOCK\t%s\t%s\n' "$held" "$(head -n 1 "$_dS/lock" 2>/dev/null)"
. ./scan.sh
echo END
