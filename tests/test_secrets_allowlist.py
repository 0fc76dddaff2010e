"""The allowlist of secret references: the directories a ``${file:...}`` reference may read
(``GTBARRIER_SECRET_FILE_DIRS``) and the variables an ``${env:...}`` reference may read
(``GTBARRIER_SECRET_ENV_NAMES``), set in the environment of the processes that resolve
references by whoever runs them, never by an option. Unset: every file and variable, as
before; set: only those, checked before the file or the variable is looked at, the error
naming the reference's kind and the allowlist, never a secret."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from state.errors import SecretReferenceError
from state.secrets import resolve

SECRET = "s3cr3t-value-9f2c"
FILE_DIRS_ENV = "GTBARRIER_SECRET_FILE_DIRS"
ENV_NAMES_ENV = "GTBARRIER_SECRET_ENV_NAMES"


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "pw").write_text(SECRET + "\n")
    (allowed / "app.properties").write_text("password=" + SECRET + "\n")
    (outside / "pw").write_text(SECRET + "\n")
    return allowed, outside


def refused(value: str, environ: dict[str, str]) -> str:
    with pytest.raises(SecretReferenceError) as caught:
        resolve(value, option="kafka.sasl.plain.password", where="gtkafka", environ=environ)
    text = str(caught.value)
    assert SECRET not in text and SECRET not in repr(caught.value)
    assert "kafka.sasl.plain.password" in text
    return text


def test_unset_allows_every_file_and_variable(dirs: tuple[Path, Path]) -> None:
    _, outside = dirs
    env = {"ANY": SECRET}
    assert resolve(f"${{file:{outside / 'pw'}}}", option="o", environ=env) == SECRET
    assert resolve("${env:ANY}", option="o", environ=env) == SECRET


def test_a_file_in_an_allowed_directory_resolves(dirs: tuple[Path, Path]) -> None:
    allowed, _ = dirs
    env = {FILE_DIRS_ENV: f"/nonexistent{os.pathsep}{allowed}"}
    assert resolve(f"${{file:{allowed / 'pw'}}}", option="o", environ=env) == SECRET
    assert resolve(f"${{file:{allowed / 'app.properties'}:password}}", option="o", environ=env) == (
        SECRET
    )


def test_a_file_outside_the_allowed_directories_is_refused_naming_them(
    dirs: tuple[Path, Path],
) -> None:
    allowed, outside = dirs
    env = {FILE_DIRS_ENV: str(allowed)}
    text = refused(f"${{file:{outside / 'pw'}}}", env)
    assert FILE_DIRS_ENV in text and str(allowed) in text and "file reference" in text
    assert str(outside / "pw") in text  # the reference is named, its content never


def test_dot_dot_and_symlinks_do_not_leave_an_allowed_directory(
    dirs: tuple[Path, Path],
) -> None:
    allowed, outside = dirs
    env = {FILE_DIRS_ENV: str(allowed)}
    refused(f"${{file:{allowed}/../outside/pw}}", env)
    (allowed / "link").symlink_to(outside / "pw")
    refused(f"${{file:{allowed / 'link'}}}", env)
    # a sibling whose name begins with the allowed one's is another directory
    sibling = allowed.parent / (allowed.name + "-evil")
    sibling.mkdir()
    (sibling / "pw").write_text(SECRET)
    refused(f"${{file:{sibling / 'pw'}}}", env)


def test_a_missing_file_outside_is_refused_as_not_allowed_not_as_missing(
    dirs: tuple[Path, Path],
) -> None:
    allowed, outside = dirs
    text = refused(f"${{file:{outside / 'absent'}}}", {FILE_DIRS_ENV: str(allowed)})
    assert "does not exist" not in text  # no probing of files outside the allowlist


def test_an_empty_list_allows_no_file(dirs: tuple[Path, Path]) -> None:
    allowed, _ = dirs
    text = refused(f"${{file:{allowed / 'pw'}}}", {FILE_DIRS_ENV: ""})
    assert FILE_DIRS_ENV in text and "no directory" in text


def test_relative_allowed_directories_are_a_config_error_naming_the_variable(
    dirs: tuple[Path, Path],
) -> None:
    allowed, _ = dirs
    text = refused(f"${{file:{allowed / 'pw'}}}", {FILE_DIRS_ENV: "relative/dir"})
    assert FILE_DIRS_ENV in text and "relative/dir" in text and "absolute" in text


def test_only_allowed_variables_resolve() -> None:
    env = {
        ENV_NAMES_ENV: "KAFKA_READER_PASSWORD, GTB_SECRET_*",
        "KAFKA_READER_PASSWORD": SECRET,
        "GTB_SECRET_PG": SECRET,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    assert resolve("${env:KAFKA_READER_PASSWORD}", option="o", environ=env) == SECRET
    assert resolve("x-${env:GTB_SECRET_PG}", option="o", environ=env) == "x-" + SECRET
    text = refused("${env:AWS_SECRET_ACCESS_KEY}", env)
    assert ENV_NAMES_ENV in text and "KAFKA_READER_PASSWORD" in text and "GTB_SECRET_*" in text
    assert "environment reference" in text
    # checked before the lookup: an unset, unlisted variable is refused as not allowed
    assert "not set" not in refused("${env:UNSET_ONE}", env)


def test_an_empty_variable_list_allows_no_variable() -> None:
    text = refused("${env:HOME}", {ENV_NAMES_ENV: "", "HOME": SECRET})
    assert ENV_NAMES_ENV in text and "no variable" in text


def test_one_list_does_not_restrict_the_other_kind(dirs: tuple[Path, Path]) -> None:
    _, outside = dirs
    env = {ENV_NAMES_ENV: "ONLY_THIS", "OTHER": SECRET}
    assert resolve(f"${{file:{outside / 'pw'}}}", option="o", environ=env) == SECRET
    refused("${env:OTHER}", env)
