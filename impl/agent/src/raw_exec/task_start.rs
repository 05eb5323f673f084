//! What a task starts with, set up between fork and exec in the supervisor's child: every
//! signal at its default and none blocked, and, for a task with a `User`, that user's
//! credentials. Only system calls there (async-signal-safe); what needs more (the user
//! database) is resolved before the fork.

use std::io;

/// The kernel's `struct sigaction` as `rt_sigaction` takes it (x86_64 and aarch64 alike).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The highest signal number (`_NSIG - 1` on Linux): the real-time signals included.
const MAX_SIGNAL: libc::c_int = 64;

/// A task's user, resolved before the fork (the user database is not async-signal-safe):
/// its uid, its primary gid and every group it is a member of, as a login would give it.
pub(super) struct Credentials {
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    groups: Vec<nix::unistd::Gid>,
}

impl Credentials {
    pub(super) fn of(name: &str) -> Result<Credentials, String> {
        use nix::unistd::{getgrouplist, User};
        let user = User::from_name(name)
            .map_err(|e| format!("looking up user {name:?}: {e}"))?
            .ok_or_else(|| format!("no user {name:?} on this host"))?;
        let c_name = std::ffi::CString::new(name).map_err(|e| format!("user {name:?}: {e}"))?;
        let groups = getgrouplist(&c_name, user.gid)
            .map_err(|e| format!("the groups of user {name:?}: {e}"))?;
        Ok(Credentials {
            uid: user.uid,
            gid: user.gid,
            groups,
        })
    }

    /// Becomes the user, between fork and exec: groups, then gid, then uid (after which
    /// none of it can be undone).
    pub(super) fn take_on(&self) -> io::Result<()> {
        use nix::unistd::{geteuid, setgid, setgroups, setuid};
        // An agent that is not root runs tasks as its own user only, as it is.
        if !geteuid().is_root() && geteuid() == self.uid {
            return Ok(());
        }
        setgroups(&self.groups)?;
        setgid(self.gid)?;
        setuid(self.uid)?;
        Ok(())
    }
}

/// Gives the calling process an empty signal mask and every signal its default disposition.
/// Run in the task's process between fork and exec, so it must be async-signal-safe: only
/// system calls. A mask and ignored dispositions survive exec, and the task would inherit
/// whatever the supervisor's parent thread had — the agent blocks SIGINT and SIGTERM on
/// every thread (its signal thread takes them with `sigwait`), and a daemon started in a
/// shell's background ignores SIGINT and SIGQUIT — so a program that relies on the defaults
/// (`sleep`, most servers) would never see its kill signal and die only of SIGKILL after the
/// kill timeout. The raw `rt_sigaction` reaches the signals glibc keeps for itself (32, 33).
pub(super) fn reset_signals() -> io::Result<()> {
    use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};
    // nix's thin wrappers of sigemptyset and sigprocmask (on the calling, only, thread):
    // nothing allocated.
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    // Raw: nix's sigaction takes a `Signal`, which names only 1–31, and goes through the C
    // library's sigaction, which refuses 32 and 33; the kernel's rt_sigaction takes them all.
    // SAFETY: rt_sigaction with a valid action of the kernel's layout and no old action.
    unsafe {
        let default = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        for signal in 1..=MAX_SIGNAL {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                &default as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                std::mem::size_of::<u64>(),
            );
        }
    }
    Ok(())
}
