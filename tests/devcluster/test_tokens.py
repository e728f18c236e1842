import pytest

from kyai_devcluster._tokens import (
    BoundObject,
    TokenAuthenticator,
    TokenRefusedError,
    issue,
    new_signing_key,
    verify,
)


def test_issued_token_verifies_to_its_service_account() -> None:
    key = new_signing_key()
    identity = verify(key, issue(key, "team-a", "kyai-worker"))
    assert identity is not None
    assert (identity.namespace, identity.name) == ("team-a", "kyai-worker")
    assert identity.username == "system:serviceaccount:team-a:kyai-worker"
    assert "system:serviceaccounts:team-a" in identity.groups


def test_token_from_another_key_or_tampered_is_refused() -> None:
    key = new_signing_key()
    token = issue(key, "team-a", "kyai-worker")
    assert verify(new_signing_key(), token) is None
    header, _payload, signature = token.split(".")
    forged = issue(key, "kube-system", "admin").split(".")[1]
    assert verify(key, f"{header}.{forged}.{signature}") is None
    assert verify(key, "kyai-devcluster") is None
    assert verify(key, "a.b") is None


def test_claims_of_a_bound_token() -> None:
    import base64
    import json

    key = new_signing_key()
    token = issue(
        key,
        "team-a",
        "w",
        audiences=["aud-1", "aud-2"],
        expiration_seconds=900,
        service_account_uid="sa-uid",
        pod=BoundObject("p", "p-uid"),
        now=1000,
    )
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    assert claims["aud"] == ["aud-1", "aud-2"]
    assert (claims["iat"], claims["nbf"], claims["exp"]) == (1000, 1000, 1900)
    assert claims["kubernetes.io"] == {
        "namespace": "team-a",
        "serviceaccount": {"name": "w", "uid": "sa-uid"},
        "pod": {"name": "p", "uid": "p-uid"},
    }


def test_the_authenticator_checks_times_with_go_joses_leeway() -> None:
    key = new_signing_key()
    now = 10_000.0
    tokens = TokenAuthenticator(key, clock=lambda: now)
    token = issue(key, "ns", "sa", expiration_seconds=600, now=now - 600 - 59)
    assert tokens.authenticate(token).username == "system:serviceaccount:ns:sa"
    with pytest.raises(TokenRefusedError, match=r"service account token has expired\]$"):
        tokens.authenticate(issue(key, "ns", "sa", expiration_seconds=600, now=now - 661))
    with pytest.raises(TokenRefusedError, match=r"is not valid yet\]$"):
        tokens.authenticate(issue(key, "ns", "sa", now=now + 120))


def test_the_authenticator_checks_audiences_and_bound_objects() -> None:
    key = new_signing_key()
    objects = {("pods", "ns", "p"): "p-uid", ("serviceaccounts", "ns", "sa"): "sa-uid"}
    tokens = TokenAuthenticator(key, lookup=lambda *k: objects.get(k))
    token = issue(key, "ns", "sa", audiences=["a", "b"], service_account_uid="sa-uid",
                  pod=BoundObject("p", "p-uid"))  # fmt: skip
    assert tokens.authenticate(token, ["b", "c"]).audiences == ("b",)
    with pytest.raises(TokenRefusedError) as refused:
        tokens.authenticate(token)
    assert str(refused.value) == (
        '[invalid bearer token, token audiences ["a" "b"] is invalid for the target audiences '
        '["https://kubernetes.default.svc.cluster.local"], token lookup failed]'
    )
    objects[("pods", "ns", "p")] = "other-uid"
    with pytest.raises(TokenRefusedError, match=r"pod UID \(other-uid\) does not match"):
        tokens.authenticate(token, ["a"])
    del objects[("pods", "ns", "p")]
    with pytest.raises(TokenRefusedError, match=r"has been invalidated\]$"):
        tokens.authenticate(token, ["a"])
