"""The desktop layer deskctl builds over a task image (src/deskctl/providers/docker/layers.py), as text: the apt
path also runs for real in tests/docker_provider/test_task_images.py; no Alpine or Fedora base is reachable here,
so their apk and dnf layers are checked only as text (docs/harbor.md says they are unverified)."""

from __future__ import annotations

import pytest

from deskctl.errors import UsageError
from deskctl.providers.docker.layers import DesktopExtras, ImageFacts, check_extras, layer_dockerfile


def facts(*commands: str, user: str = "", zoneinfo: bool = False, locales: tuple[str, ...] = ()) -> ImageFacts:
    return ImageFacts(image_id="sha256:abc", user=user, commands=commands, zoneinfo=zoneinfo, locales=locales)


def test_an_image_with_xvfb_and_no_extras_needs_no_layer() -> None:
    assert layer_dockerfile("task:1", facts("Xvfb", "apt-get"), DesktopExtras()) is None


def test_apt_layer_adds_xvfb_and_xauth_as_root_and_gives_the_image_its_user_back() -> None:
    text = layer_dockerfile("task:1", facts("apt-get", user="1000:1000"), DesktopExtras())
    assert text is not None
    lines = text.splitlines()
    assert lines[1:3] == ["FROM task:1", "USER root"]
    assert "apt-get install -y --no-install-recommends xvfb xauth;" in lines[3]
    assert lines[4] == "USER 1000:1000"
    # nothing else of the image changes: no WORKDIR, ENV, ENTRYPOINT or CMD line
    assert not any(line.split(" ")[0] in ("WORKDIR", "ENV", "ENTRYPOINT", "CMD") for line in lines)


def test_an_image_without_user_gets_root_back() -> None:
    text = layer_dockerfile("task:1", facts("apt-get"), DesktopExtras())
    assert text is not None and text.splitlines()[-1] == "USER root"


def test_apt_layer_with_fonts_locale_and_timezone() -> None:
    extras = check_extras({"fonts": "fonts-wqy-zenhei, fonts-noto-cjk", "locale": "zh_CN.UTF-8",
                           "timezone": "Asia/Shanghai"})
    text = layer_dockerfile("task:1", facts("Xvfb", "apt-get"), extras)
    assert text is not None
    run = text.splitlines()[3]
    assert "install -y --no-install-recommends fonts-wqy-zenhei fonts-noto-cjk locales tzdata;" in run
    assert "localedef -i zh_CN -c -f UTF-8 -A /usr/share/locale/locale.alias zh_CN.UTF-8" in run
    assert "xvfb" not in run  # the image has its own
    assert extras.environment() == {"LANG": "zh_CN.UTF-8", "LC_ALL": "zh_CN.UTF-8", "TZ": "Asia/Shanghai"}


def test_a_locale_and_time_zones_the_image_has_add_nothing() -> None:
    extras = check_extras({"locale": "zh_CN.UTF-8", "timezone": "Asia/Shanghai"})
    assert layer_dockerfile("task:1", facts("Xvfb", "apt-get", zoneinfo=True, locales=("C.utf8", "zh_CN.utf8")),
                            extras) is None


def test_apk_layer_text() -> None:  # unverified here: no Alpine image
    extras = check_extras({"fonts": ["font-wqy-zenhei"], "timezone": "Asia/Shanghai"})
    text = layer_dockerfile("alpine-task:1", facts("apk"), extras)
    assert text is not None
    assert text.splitlines()[3] == "RUN set -eu; apk add --no-cache xvfb xauth font-wqy-zenhei tzdata"


def test_dnf_layer_text() -> None:  # unverified here: no Fedora image
    extras = check_extras({"locale": "de_DE.UTF-8"})
    text = layer_dockerfile("fedora-task:1", facts("dnf", user="app"), extras)
    assert text is not None
    run = text.splitlines()[3]
    assert "dnf install -y --setopt=install_weak_deps=False xorg-x11-server-Xvfb xorg-x11-xauth " \
           "glibc-langpack-de" in run
    assert "microdnf install -y" in run  # the minimal images' dnf
    assert text.splitlines()[-1] == "USER app"


def test_an_image_without_a_known_package_manager_is_refused_with_the_reason() -> None:
    with pytest.raises(UsageError) as caught:
        layer_dockerfile("busybox-task:1", facts(), DesktopExtras())
    assert caught.value.code == "usage.bad_image"
    assert "no Xvfb" in caught.value.message and "apt-get, apk, dnf" in caught.value.message


@pytest.mark.parametrize("options", [{"fonts": "fonts;rm -rf /"}, {"fonts": 3}, {"locale": "zh CN"},
                                     {"locale": "$(id)"}, {"timezone": "../../etc/passwd"}, {"timezone": "a b"}])
def test_bad_extras_are_usage_errors(options: dict[str, object]) -> None:
    with pytest.raises(UsageError) as caught:
        check_extras(options)
    assert caught.value.code == "usage.bad_option"


@pytest.mark.parametrize("options", [{"display": "x"}, {"display": -1}, {"display": True}, {"env": {"1A": "x"}},
                                     {"env": "LANG=C"}, {"fonts": ["Bad Name"]}])
def test_the_docker_providers_new_options_are_checked_when_given(options: dict[str, object]) -> None:
    from deskctl.providers.docker import DockerProvider

    with pytest.raises(UsageError) as caught:
        DockerProvider.check_options(options)
    assert caught.value.code in ("usage.bad_option", "usage.bad_env"), caught.value.code


def test_display_takes_a_number_or_a_display_name() -> None:
    from deskctl.providers.docker import DockerProvider

    for good in (0, 1, "1", ":1"):
        DockerProvider.check_options({"display": good})
