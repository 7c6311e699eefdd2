"""Kubernetes name syntax, as apimachinery's util/validation checks it.

Each function returns the problems found (apimachinery's messages), an empty list when the
value is valid. Purely computational.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
QUALIFIED_NAME_MAX_LENGTH = 63

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

_DNS1123_LABEL = re.compile(f"^{_DNS1123_LABEL_FMT}$")
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_QUALIFIED_NAME = re.compile(f"^{_QUALIFIED_NAME_FMT}$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_DNS1123_SUBDOMAIN_FMT}')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc', "
    f"regex used for validation is '{_DNS1123_LABEL_FMT}')"
)
_QUALIFIED_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for "
    f"validation is '{_QUALIFIED_NAME_FMT}')"
)


def dns1123_subdomain(value: str) -> list[str]:
    """validation.IsDNS1123Subdomain: object names, a pod's spec.schedulerName."""
    errs: list[str] = []
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX_LENGTH} characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(_SUBDOMAIN_MSG)
    return errs


def dns1123_label(value: str) -> list[str]:
    """validation.IsDNS1123Label: namespace names."""
    errs: list[str] = []
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        errs.append(f"must be no more than {DNS1123_LABEL_MAX_LENGTH} characters")
    if not _DNS1123_LABEL.match(value):
        errs.append(_LABEL_MSG)
    return errs


def qualified_name(value: str) -> list[str]:
    """validation.IsQualifiedName: an optional DNS subdomain prefix and '/', then a name."""
    parts = value.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
    else:
        return ["a qualified name " + _QUALIFIED_MSG
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errs = [f"prefix part {m}" for m in dns1123_subdomain(prefix)] if prefix else []
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append(f"name part must be no more than {QUALIFIED_NAME_MAX_LENGTH} characters")
    if name and not _QUALIFIED_NAME.match(name):
        errs.append("name part " + _QUALIFIED_MSG)
    return errs


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: outside the kubernetes.io/ namespace (so it has a
    domain prefix), not prefixed "requests.", and still a qualified name as a quota name."""
    native = "/" not in name or "kubernetes.io/" in name
    if native or name.startswith("requests."):
        return False
    return not qualified_name("requests." + name)
