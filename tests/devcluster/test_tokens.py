from kyai.devcluster._tokens import issue, new_signing_key, verify


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
