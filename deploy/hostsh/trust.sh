# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# Input: _dS (state_dir). Rule: deploy.statedir.trust.TRUST_RULE.
#
# The lock script's trust check (shell, run before anything in state_dir is read or written).
# ``_dI``, the uid the shell runs as: the owner of ``/`` when ``[ -O / ]`` (test's own
# geteuid(); no process: root, the usual case), else ``id -u``. Never bash's ``$EUID``: bash
# makes it read-only only when the environment did not bring one, so an ``EUID`` passed in
# (sshd SetEnv/AcceptEnv, sudo keeping the environment, pam_env) would name whose state_dir
# is trusted. ``_de PATH...``: one ``stat`` of ``/`` and those of the paths that exist
# (builtin tests), judged by ``_dk``, which pairs each line with its path: a name is never
# parsed out of stat's output, so a line break in it cannot split a line (a line more or
# less than asked for: "changed while it was judged"). A state_dir whose name holds a line
# break is resolved on its own (``_dr``: the one case with one process more).

case $_dS in /*) ;; *) _dS=$PWD/$_dS ;; esac
_dN='
'
_dD=$_dS; case $_dS in *"$_dN"*) _dD=/ ;; esac
_dR=$(realpath -m -- "$_dD")
_dr() { _dR=$(realpath "$1" -- "$_dS" 2>/dev/null && echo .) && _dR=${_dR%"$_dN".}; }
[ "$_dD" = "$_dS" ] || _dr -m
set --
for _dp in "$_dS" "$_dR"; do while [ -n "$_dp" ]; do set -- "$@" "$_dp"; _dp=${_dp%/*}; done; done
_de() {
  _dC=1; set -- / "$@"
  for _dp; do
    shift
    if [ -e "$_dp" ] || [ -h "$_dp" ]; then
      set -- "$@" "$_dp"; [ "$_dp" = "$_dS" ] && _dC=
    fi
  done
  _dL=$(exec stat -c '%u %f %U' -- "$@" 2>/dev/null </dev/null)
  _dk "$_dL" "$@"
}
_dk() {
  set -f; _dJ=$IFS; IFS=$_dN; _dl=$1; shift
  for _dl in $_dl; do
    IFS=$_dJ
    [ "$#" -gt 0 ] || { printf 'UNTRUSTED\t%s\t%s\n' "$_dS" "changed while it was judged"; exit 73; }
    _dn=$1; shift; _du=${_dl%% *}; _dl=${_dl#* }; _df=${_dl%% *}; _do=${_dl#* }
    if [ -z "$_dI" ]; then if [ -O / ]; then _dI=$_du; else _dI=$(id -u); fi; fi
    if [ "$_du" != 0 ] && [ "$_du" != "$_dI" ]; then _dX="is owned by $_do (uid $_du)"
    elif [ $((0x$_df & 61440)) = 40960 ] || [ $((0x$_df & 18)) = 0 ]; then continue
    elif [ $((0x$_df & 512)) != 0 ] && [ "$_du" = 0 ] && [ "$_dn" != "$_dS" ] && [ "$_dn" != "$_dR" ]; then continue
    else _dX="is writable by group or others (mode $(printf %o $((0x$_df & 4095))), owner $_do)"
    fi
    printf 'UNTRUSTED\t%s\t%s\n' "$_dn" "$_dX"; exit 73
  done
  IFS=$_dJ; set +f
  [ "$#" = 0 ] || { printf 'UNTRUSTED\t%s\t%s\n' "$_dS" "changed while it was judged"; exit 73; }
}
_dI=; _de "$@"
if [ -z "$_dC" ] && [ -e "$_dS" ] && ! [ "$_dR" -ef "$_dS" ]; then printf 'UNTRUSTED\t%s\t%s\n' "$_dS" "resolves to a path that cannot be named"; exit 73; fi
_dp=$_dS/runs; set --
while [ -n "$_dp" ] && [ ! -d "$_dp" ] && [ ! -h "$_dp" ]; do set -- "$_dp" "$@"; _dp=${_dp%/*}; done
if [ "$#" -gt 0 ] || [ -n "$_dC" ]; then
  [ "$#" -eq 0 ] || _dM=$(LC_ALL=C exec mkdir -- "$@" 2>&1) || for _dp; do
    [ -e "$_dp" ] || [ -h "$_dp" ] || { echo "NOSTATE cannot create $_dS/runs: $_dM"; exit 70; }
  done
  if [ "$_dD" = "$_dS" ]; then _dR=$(exec realpath -e -- "$_dS" 2>/dev/null); else _dr -e; fi || { printf 'UNTRUSTED\t%s\t%s\n' "$_dS" "vanished once created"; exit 73; }
  [ "$_dR" -ef "$_dS" ] || { printf 'UNTRUSTED\t%s\t%s\n' "$_dS" "resolves to a path that cannot be named"; exit 73; }
  set --
  for _dp in "$_dS" "$_dR"; do while [ -n "$_dp" ]; do set -- "$@" "$_dp"; _dp=${_dp%/*}; done; done
  _de "$@" "$_dS/runs"
  [ -z "$_dC" ] || { printf 'UNTRUSTED\t%s\t%s\n' "$_dS" "changed while it was created"; exit 73; }
fi
for _dp in runs lock; do
  _dX=
  if [ -h "$_dS/$_dp" ]; then _dX="is a symbolic link"
  elif [ $_dp = lock ] && [ -e "$_dS/lock" ] && [ ! -f "$_dS/lock" ]; then _dX="is not a plain file"
  fi
  [ -z "$_dX" ] || { printf 'UNTRUSTED\t%s\t%s\n' "$_dS/$_dp" "$_dX"; exit 73; }
done
