"""Secret references in option values: what resolves, and errors that never show a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from state.errors import ConfigError, SecretReferenceError
from state.secrets import has_reference, parse_properties, resolve

SECRET = "s3cr3t-marker-7f1c"


def test_an_environment_variable_resolves_whole_or_inside_a_value() -> None:
    env = {"PGPASSWORD": SECRET}
    assert resolve("${env:PGPASSWORD}", option="o", environ=env) == SECRET
    dsn = "postgresql://app:${env:PGPASSWORD}@db/orders"
    assert resolve(dsn, option="o", environ=env) == f"postgresql://app:{SECRET}@db/orders"
    assert resolve("plain value", option="o", environ=env) == "plain value"
    assert has_reference(dsn) and not has_reference("plain $ {env:x} {env:y}")


def test_a_file_resolves_without_its_trailing_line_break(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text(SECRET + "\n")
    assert resolve(f"${{file:{path}}}", option="o") == SECRET


def test_a_key_of_a_properties_file_resolves(tmp_path: Path) -> None:
    path = tmp_path / "creds.properties"
    path.write_text(f"# credentials\nusername = app\npassword: {SECRET}\n! other\nempty\n")
    assert resolve(f"${{file:{path}:password}}", option="o") == SECRET
    assert resolve(f"${{file:{path}:username}}", option="o") == "app"
    assert parse_properties(path.read_text()) == {
        "username": "app",
        "password": SECRET,
        "empty": "",
    }


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("${env:NOT_SET_ANYWHERE}", "names an environment variable that is not set"),
        ("${env:}", "names no variable"),
        ("${file:relative/path}", "must name an absolute path"),
        ("${file:/no/such/file}", "names a file that does not exist"),
        ("${vault:zk}", "names an unknown provider"),
    ],
)
def test_an_unresolvable_reference_names_the_option_and_the_reference(
    reference: str, why: str
) -> None:
    with pytest.raises(SecretReferenceError) as info:
        resolve(reference, option="s3.secretAccessKey", where="barrier", environ={})
    text = str(info.value)
    assert text.startswith(f"barrier: option 's3.secretAccessKey': secret reference {reference}")
    assert why in text
    assert isinstance(info.value, ConfigError) and not info.value.retriable


def test_a_missing_key_names_the_reference_and_never_the_file_content(tmp_path: Path) -> None:
    path = tmp_path / "creds.properties"
    path.write_text(f"password={SECRET}\n")
    with pytest.raises(SecretReferenceError) as info:
        resolve(f"${{file:{path}:user}}", option="o")
    assert "names a key that the properties file does not have" in str(info.value)
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.args)
