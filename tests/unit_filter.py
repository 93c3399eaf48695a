#!/usr/bin/env python3
"""Runs a command under a systemd unit's system call filter, as systemd
applies it, without systemd as PID 1:

    tests/unit_filter.py UNIT COMMAND [ARG...]

The unit's `SystemCallFilter=` lines are read in order: the first decides
whether the list allows (then `@default` is in it too) or denies, each
later one adds to or takes from it, groups are expanded by
`systemd-analyze syscall-filter`. A call outside the set fails with the
unit's `SystemCallErrorNumber=` (EPERM unless it names another), as under
systemd. The filter is built with libseccomp, which systemd itself uses,
through ctypes, then the command replaces this process.
"""
import ctypes
import errno
import os
import subprocess
import sys

SCMP_ACT_ALLOW = 0x7FFF0000


def scmp_act_errno(number):
    return 0x00050000 | (number & 0xFFFF)


def expand(item, groups):
    """The system calls `item` names: itself, or a group's, recursively."""
    if not item.startswith("@"):
        return {item}
    if item not in groups:
        out = subprocess.run(["systemd-analyze", "syscall-filter", item],
                             capture_output=True, text=True, check=True).stdout
        members = [l.strip() for l in out.splitlines()[1:]]
        groups[item] = set()
        for member in members:
            if member and not member.startswith("#"):
                groups[item] |= expand(member, groups)
    return groups[item]


def unit_filter(unit):
    """(allow_list, calls, errno) from the unit's [Service] lines."""
    allow_list, calls, error = None, set(), errno.EPERM
    groups = {}
    for line in open(unit):
        key, _, value = line.strip().partition("=")
        if key == "SystemCallErrorNumber":
            error = getattr(errno, value)
        if key != "SystemCallFilter" or not value:
            continue
        deny = value.startswith("~")
        names = set()
        for item in value.lstrip("~").split():
            names |= expand(item, groups)
        if allow_list is None:
            allow_list = not deny
            if allow_list:
                calls |= expand("@default", groups)
        if deny != (not allow_list):
            calls -= names  # the opposite kind of line takes out
        else:
            calls |= names
    return allow_list, calls, error


def main():
    unit, command = sys.argv[1], sys.argv[2:]
    allow_list, calls, error = unit_filter(unit)
    if allow_list is None:
        sys.exit(f"{unit} has no SystemCallFilter= line")
    seccomp = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    seccomp.seccomp_init.restype = ctypes.c_void_p
    seccomp.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    seccomp.seccomp_load.argtypes = [ctypes.c_void_p]
    refused, allowed = scmp_act_errno(error), SCMP_ACT_ALLOW
    default, listed = (refused, allowed) if allow_list else (allowed, refused)
    ctx = seccomp.seccomp_init(default)
    for call in sorted(calls):
        number = seccomp.seccomp_syscall_resolve_name(call.encode())
        if number < 0:
            continue  # not a system call on this architecture
        seccomp.seccomp_rule_add(ctx, listed, number, 0)
    if seccomp.seccomp_load(ctx) != 0:
        sys.exit("loading the system call filter failed")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
