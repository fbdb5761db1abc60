"""known_hosts as OpenSSH reads it: markers, key rotation, hashed names, literal brackets."""

from __future__ import annotations

import base64
import hashlib
import hmac

from deploy.remote.hostkeys import KnownHosts, Verdict

K1 = "AAAAC3NzaC1lZDI1NTE5AAAAIDJDBuQ3xRpqt7tImXVLm38i8vviVTv7SL7xr/lATEf9"
K2 = "AAAAC3NzaC1lZDI1NTE5AAAAIDtq53Nympoo9+oPluVqK5yPewKXMa8nsLqtRJCewWrW"
HOST = "[127.0.0.1]:2222"


def blob(b64: str) -> bytes:
    return base64.b64decode(b64)


def judge(text: str, key: str, name: str = HOST) -> Verdict:
    return KnownHosts.parse(text).verdict(name, "ssh-ed25519", blob(key))[0]


def test_two_keys_of_one_type_either_matches_during_a_rotation() -> None:
    text = f"{HOST} ssh-ed25519 {K1}\n{HOST} ssh-ed25519 {K2}\n"
    assert judge(text, K1) is Verdict.TRUSTED
    assert judge(text, K2) is Verdict.TRUSTED


def test_a_different_key_of_a_listed_type_is_changed_and_unlisted_host_unknown() -> None:
    text = f"{HOST} ssh-ed25519 {K1}\n"
    assert judge(text, K2) is Verdict.CHANGED
    assert judge(text, K1, "[127.0.0.1]:2223") is Verdict.UNKNOWN


def test_revoked_wins_even_over_a_plain_line_for_the_same_key() -> None:
    text = f"{HOST} ssh-ed25519 {K1}\n@revoked * ssh-ed25519 {K1}\n"
    verdict, entry = KnownHosts.parse(text).verdict(HOST, "ssh-ed25519", blob(K1))
    assert verdict is Verdict.REVOKED and entry is not None and entry.line == 2


def test_cert_authority_only_is_reported_and_a_plain_key_beside_it_still_counts() -> None:
    ca = f"@cert-authority *.example.com,[127.0.0.1]:* ssh-ed25519 {K2}\n"
    assert judge(ca, K1) is Verdict.CERT_AUTHORITY_ONLY
    assert judge(ca + f"{HOST} ssh-ed25519 {K1}\n", K1) is Verdict.TRUSTED


def test_brackets_are_literal_globs_and_negation_vetoes() -> None:
    assert judge(f"[127.0.0.2]:2222 ssh-ed25519 {K1}\n", K1) is Verdict.UNKNOWN
    assert judge(f"[127.0.0.?]:* ssh-ed25519 {K1}\n", K1) is Verdict.TRUSTED
    assert judge(f"[127.0.0.*]:*,![127.0.0.1]:2222 ssh-ed25519 {K1}\n", K1) is Verdict.UNKNOWN


def test_hashed_names_match_and_bad_lines_are_skipped_not_fatal() -> None:
    salt = b"0123456789abcdefghij"
    digest = hmac.new(salt, HOST.encode(), hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    text = f"@bogus x ssh-ed25519 {K1}\nonly-two fields\nh ssh-ed25519 !!!\n{hashed} ssh-ed25519 {K1}\n"
    known = KnownHosts.parse(text)
    assert [entry.line for entry in known.entries] == [4], "lines 1-3 skipped, not fatal"
    assert known.verdict(HOST, "ssh-ed25519", blob(K1))[0] is Verdict.TRUSTED
    assert known.key_types(HOST) == ["ssh-ed25519"]
