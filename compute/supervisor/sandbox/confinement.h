#pragma once

#include <core/error.h>

#include <QString>
#include <QStringList>

#include <cstdint>

namespace tessera::compute::sandbox {

// What a compute worker may still do once confined (docs/SECURITY.md, "The compute worker"). Each
// limit is the kernel's to enforce, applied by the worker to its own process before it reads
// anything a job owner wrote; every thread it starts afterwards inherits them, and none can be
// lifted again (PR_SET_NO_NEW_PRIVS).
struct Confinement {
    // Files and folders it may read (a folder: everything beneath it), besides the system's
    // libraries (/usr, /etc/ld.so.cache) and its own /proc entry and CPU topology.
    QStringList readable;
    // Folders it may read and write beneath (its scratch folder).
    QStringList writable;
    // Address space it may add to what it maps now, in bytes (RLIMIT_AS); 0: no limit.
    std::int64_t memoryBytes = 0;
};

// What was applied. Landlock needs Linux 5.13 or later: without it the worker's files are not
// confined, which the warnings say (the node logs them); everything else is required.
struct Confined {
    int landlockAbi = 0; // 0: no Landlock on this kernel
    std::int64_t addressSpaceLimit = 0; // bytes; 0: none
    QStringList warnings;
};

// Confines the calling process: no new privileges, a seccomp filter (no new sockets, connect,
// bind, listen, accept, exec, ptrace, fork or vfork, clone of anything but a thread, kill, mount,
// namespaces, BPF, perf events, io_uring, kernel keyrings or modules: each refused with EPERM),
// Landlock over the file system, and the memory limit. Call it while the process has one thread:
// Landlock binds the calling thread and the threads it starts later.
core::Result<Confined> confine(const Confinement& confinement);

} // namespace tessera::compute::sandbox
