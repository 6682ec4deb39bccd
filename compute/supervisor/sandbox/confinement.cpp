#include "confinement.h"

#include <QFile>
#include <QFileInfo>

#include <asm/unistd.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

// Rights newer than this system's kernel headers (Debian 12's are Linux 6.1).
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

namespace tessera::compute::sandbox {

namespace {

#if defined(__x86_64__)
constexpr std::uint32_t ThisArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t ThisArch = AUDIT_ARCH_AARCH64;
#else
#error "the compute worker's seccomp filter knows x86_64 and aarch64"
#endif

core::Error failure(const QString& what)
{
    return { QStringLiteral("sandbox"), QStringLiteral("%1: %2").arg(what, QString::fromLocal8Bit(std::strerror(errno))) };
}

// The calls a worker never needs: the network (no new sockets at all: it talks to its supervisor
// over the pipes it was started with), other programs and processes, and the kernel's
// administrative surfaces.
std::vector<unsigned> deniedCalls()
{
    std::vector<unsigned> calls = { __NR_socket, __NR_socketpair, __NR_connect, __NR_bind, __NR_listen, __NR_accept, __NR_accept4,
        __NR_execve, __NR_execveat, __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_kill, __NR_mount,
        __NR_umount2, __NR_pivot_root, __NR_chroot, __NR_unshare, __NR_setns, __NR_bpf, __NR_perf_event_open, __NR_keyctl,
        __NR_add_key, __NR_request_key, __NR_init_module, __NR_finit_module, __NR_delete_module, __NR_kexec_load, __NR_reboot,
        __NR_swapon, __NR_swapoff, __NR_userfaultfd, __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register };
#ifdef __NR_fork
    calls.push_back(__NR_fork);
#endif
#ifdef __NR_vfork
    calls.push_back(__NR_vfork);
#endif
    // Other processes, by any name: tkill (glibc signals its own threads with tgkill, below), and
    // pidfds, through which a process is signalled or its descriptors taken without kill.
    for (unsigned call : { unsigned(__NR_tkill), unsigned(__NR_pidfd_open), unsigned(__NR_pidfd_send_signal),
             unsigned(__NR_pidfd_getfd), unsigned(__NR_process_madvise) })
        calls.push_back(call);
    // Memory outside the address-space limit: a memfd's pages are the machine's until it is closed,
    // whether mapped or not.
    calls.push_back(__NR_memfd_create);
#ifdef __NR_memfd_secret
    calls.push_back(__NR_memfd_secret);
#endif
    // A place ahead of the computer's owner: the worker runs at the priority its supervisor chose
    // (set before it confines itself) and may not raise it, take a real-time class or change its
    // limits (a worker started as root could otherwise lift them).
    for (unsigned call : { unsigned(__NR_setpriority), unsigned(__NR_sched_setscheduler), unsigned(__NR_sched_setparam),
             unsigned(__NR_sched_setattr), unsigned(__NR_ioprio_set), unsigned(__NR_setrlimit) })
        calls.push_back(call);
    return calls;
}

// Calls allowed with one argument only: signals to this process's own threads (glibc's raise and
// pthread_kill are tgkill(getpid(), tid, sig); abort() needs it), and reading limits (prlimit64
// with no new limit is how glibc's getrlimit asks).
struct ArgumentRule {
    unsigned call;
    unsigned argument;
    std::uint64_t allowed;
};

core::Status installSeccomp()
{
    std::vector<sock_filter> program;
    auto statement = [&](std::uint16_t code, std::uint32_t k) { program.push_back(BPF_STMT(code, k)); };
    auto jump = [&](std::uint16_t code, std::uint32_t k, std::uint8_t ifTrue, std::uint8_t ifFalse) {
        program.push_back(BPF_JUMP(code, k, ifTrue, ifFalse));
    };
    const std::uint32_t refuse = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
    // Another architecture's calls (a 32-bit entry point) would dodge the numbers below.
    statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
    jump(BPF_JMP | BPF_JEQ | BPF_K, ThisArch, 1, 0);
    statement(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
#if defined(__x86_64__)
    jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1); // the x32 ABI's numbers
    statement(BPF_RET | BPF_K, refuse);
#endif
    for (const unsigned call : deniedCalls()) {
        jump(BPF_JMP | BPF_JEQ | BPF_K, call, 0, 1);
        statement(BPF_RET | BPF_K, refuse);
    }
    const auto self = std::uint64_t(::getpid());
    const ArgumentRule rules[] = { { __NR_tgkill, 0, self }, { __NR_rt_tgsigqueueinfo, 0, self },
        { __NR_rt_sigqueueinfo, 0, self }, { __NR_prlimit64, 2, 0 } };
    for (const auto& rule : rules) {
        // The argument's two 32-bit halves (little-endian) against the allowed value; anything else
        // is refused. The accumulator holds the argument afterwards, so each rule ends in a return.
        const auto at = std::uint32_t(offsetof(seccomp_data, args) + 8 * rule.argument);
        jump(BPF_JMP | BPF_JEQ | BPF_K, rule.call, 0, 6);
        statement(BPF_LD | BPF_W | BPF_ABS, at);
        jump(BPF_JMP | BPF_JEQ | BPF_K, std::uint32_t(rule.allowed), 0, 3);
        statement(BPF_LD | BPF_W | BPF_ABS, at + 4);
        jump(BPF_JMP | BPF_JEQ | BPF_K, std::uint32_t(rule.allowed >> 32), 0, 1);
        statement(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        statement(BPF_RET | BPF_K, refuse);
    }
    // clone3 hides its flags in memory a filter cannot read: "not here", and glibc falls back to
    // clone, whose flags it can.
    jump(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1);
    statement(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA));
    // clone: threads (LibTorch's and OpenMP's) only, no new process.
    jump(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3);
    statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args)); // the flags' low 32 bits
    jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0);
    statement(BPF_RET | BPF_K, refuse);
    statement(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);

    sock_fprog filter { static_cast<unsigned short>(program.size()), program.data() };
    // SPEC_ALLOW: without it the kernel turns on its speculation mitigations (SSBD, STIBP) for a
    // filtered process where they are "seccomp"-conditional, which slows training by several
    // percent; they guard a process's memory against its own code, and the worker has no secret
    // (no key, nothing but the job's own data). Kernels before 4.17 do not know the flag.
    if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_SPEC_ALLOW, &filter) != 0
        && (errno != EINVAL || syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &filter) != 0))
        return failure(QStringLiteral("cannot install the seccomp filter"));
    return {};
}

constexpr std::uint64_t FileRights
    = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE;

core::Result<int> installLandlock(const Confinement& confinement, QStringList& warnings)
{
    const long abi = syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) {
        warnings << QStringLiteral("this kernel has no Landlock (Linux 5.13 or later, with landlock among the LSMs): "
                                   "the compute worker's files are not confined");
        return 0;
    }
    std::uint64_t handled = (1ULL << 13) - 1; // ABI 1: every right from EXECUTE to MAKE_SYM
    if (abi >= 2)
        handled |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3)
        handled |= LANDLOCK_ACCESS_FS_TRUNCATE;
    // landlock_ruleset_attr as of ABI 6 (Linux 6.12), which these headers (Linux 6.1) predate:
    // `scoped` keeps signals (and abstract Unix sockets) inside the worker's own domain, so that
    // not even a call the seccomp filter lets through reaches the supervisor.
    struct {
        std::uint64_t handledAccessFs;
        std::uint64_t handledAccessNet;
        std::uint64_t scoped;
    } attributes {};
    attributes.handledAccessFs = handled;
    std::size_t attributesSize = sizeof attributes.handledAccessFs;
    if (abi >= 6) {
        attributes.scoped = LANDLOCK_SCOPE_SIGNAL | LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET;
        attributesSize = sizeof attributes;
    }
    const int ruleset = int(syscall(__NR_landlock_create_ruleset, &attributes, attributesSize, 0));
    if (ruleset < 0)
        return failure(QStringLiteral("cannot create a Landlock ruleset"));

    constexpr std::uint64_t read = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_EXECUTE;
    auto allow = [&](const QString& path, std::uint64_t rights) -> core::Status {
        const QFileInfo info(path);
        if (!info.exists())
            return {}; // nothing there to read or write
        const int fd = ::open(QFile::encodeName(path).constData(), O_PATH | O_CLOEXEC);
        if (fd < 0)
            return failure(QStringLiteral("cannot open %1 for the sandbox").arg(path));
        landlock_path_beneath_attr beneath {};
        beneath.allowed_access = (info.isDir() ? rights : rights & FileRights) & handled;
        beneath.parent_fd = fd;
        const long added = syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0);
        ::close(fd);
        if (added != 0)
            return failure(QStringLiteral("cannot let the sandbox reach %1").arg(path));
        return {};
    };
    // The system's libraries and what LibTorch, OpenMP and OpenBLAS read of the machine (LibTorch
    // seeds its default generator from /dev/urandom before a job's seed replaces it).
    const QStringList system = { QStringLiteral("/usr"), QStringLiteral("/lib"), QStringLiteral("/lib64"),
        QStringLiteral("/etc/ld.so.cache"), QStringLiteral("/etc/localtime"), QStringLiteral("/proc/self"),
        QStringLiteral("/proc/meminfo"), QStringLiteral("/proc/cpuinfo"), QStringLiteral("/proc/stat"),
        QStringLiteral("/sys/devices/system/cpu"), QStringLiteral("/sys/fs/cgroup"), QStringLiteral("/dev/urandom") };
    core::Status status;
    for (const auto& path : system)
        if (status = allow(path, read); !status)
            break;
    for (qsizetype i = 0; status && i < confinement.readable.size(); ++i)
        status = allow(confinement.readable[i], read);
    for (qsizetype i = 0; status && i < confinement.writable.size(); ++i)
        status = allow(confinement.writable[i], handled);
    if (status)
        status = allow(QStringLiteral("/dev/null"), LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE);
    if (status && syscall(__NR_landlock_restrict_self, ruleset, 0) != 0)
        status = failure(QStringLiteral("cannot apply the Landlock ruleset"));
    ::close(ruleset);
    if (!status)
        return status.error();
    return int(abi);
}

// Bytes of address space mapped now (VmSize), to which the limit adds the job's allowance.
std::int64_t mappedNow()
{
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly))
        return 0;
    for (const auto& line : status.readAll().split('\n')) {
        if (line.startsWith("VmSize:"))
            return line.mid(7).trimmed().split(' ').first().toLongLong() * 1024;
    }
    return 0;
}

} // namespace

namespace {

// Every capability the process has, gone for good: a worker started as root (a test, a node run as
// root) keeps root's user id but none of its powers (raising limits or priorities, reading other
// users' files, signalling other processes).
core::Status dropCapabilities()
{
    for (int capability = 0; capability <= 63; ++capability) {
        if (prctl(PR_CAPBSET_READ, capability, 0, 0, 0) > 0 && prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0
            && errno != EPERM) // without CAP_SETPCAP (not root) there is nothing to drop
            return failure(QStringLiteral("cannot drop capability %1").arg(capability));
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    __user_cap_header_struct header { _LINUX_CAPABILITY_VERSION_3, 0 };
    __user_cap_data_struct none[2] {};
    if (syscall(SYS_capset, &header, none) != 0)
        return failure(QStringLiteral("cannot drop its capabilities"));
    return {};
}

} // namespace

core::Result<Confined> confine(const Confinement& confinement)
{
    Confined confined;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return failure(QStringLiteral("cannot drop the right to gain privileges"));
    if (confinement.memoryBytes > 0) {
        const std::int64_t limit = mappedNow() + confinement.memoryBytes;
        const rlimit memory { rlim_t(limit), rlim_t(limit) };
        if (setrlimit(RLIMIT_AS, &memory) != 0)
            return failure(QStringLiteral("cannot limit the address space"));
        confined.addressSpaceLimit = limit;
    }
    if (auto status = dropCapabilities(); !status)
        return status.error();
    // Landlock before seccomp: its own calls are not on the filter's list, but keep the order
    // that needs nothing of the other.
    auto landlock = installLandlock(confinement, confined.warnings);
    if (!landlock)
        return landlock.error();
    confined.landlockAbi = *landlock;
    if (auto status = installSeccomp(); !status)
        return status.error();
    return confined;
}

} // namespace tessera::compute::sandbox
