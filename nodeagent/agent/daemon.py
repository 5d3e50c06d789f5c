"""The agent's loop (docs/agent.md §The daemon).

One thread, two kinds of step. Local steps never wait for the server: they notice jobs that ended, enforce
lease expiry and grace periods, sample the GPUs and spool a usage report. Server steps send what is pending
(acknowledgements, starts, spooled reports in order, exits once their reports are acknowledged), heartbeat and
fetch commands; when the server cannot be reached they back off (1 s doubling to 60 s, with jitter) while the
local steps go on.

With a server that speaks protocol 2 (its register answer says so), the server step is one report instead:
everything since the last (the samples spooled since, acknowledgements, starts, exits, GPU health) in one
gzipped request, at the interval the server's last answer gave, or at once after an event that matters now
(a job ended, a bind applied or refused, any command refused). The command poll then waits on a thread of
its own (nodeagent.agent.poller), up to the server's poll_seconds. A server that does not say protocol 2 is
spoken to in protocol 1, as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import shlex
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from nodeagent.agent import VERSION, checkpoints, jobs, sandbox_cgroups, sandbox_logs, usage
from nodeagent.agent.backend import GpuBackend, GpuSample
from nodeagent.agent.client import Backoff, Client, Rejected, Unavailable
from nodeagent.agent.fsutil import read_json
from nodeagent.agent.gang import bind_gang
from nodeagent.agent.poller import Poller
from nodeagent.agent.records import Job
from nodeagent.agent.sandbox import Sandbox
from nodeagent.agent.sandbox_cgroups import Cgroups, Limits
from nodeagent.agent.sandbox_gpus import GpuDrained, GpuGuard
from nodeagent.agent.sandbox_users import NoTenantUser, tenant_user
from nodeagent.agent.state import StateDir

log = logging.getLogger("gpumarket.agent")
LONG_POLL_MAX_S = 25
MIB = 1024 * 1024
DEFAULT_PIDS = 4096  # per job, when the bind names none: a fork bomb stops there, a data loader does not


class StartupError(Exception):
    """A reason not to start at all, said in one line."""


class Refuse(Exception):
    """A command the agent refuses; the message goes back in the acknowledgement."""


@dataclass(frozen=True)
class Settings:
    server: str
    name: str
    bootstrap_token: str
    interval: float
    checkpoint_root: Path
    job_user: tuple[int, int] | None = None  # (uid, gid) jobs run as; None: the agent's own user
    sandbox: Sandbox | None = None  # None: jobs run unconfined (sandbox_off says why)
    sandbox_off: str = "off (--sandbox off)"
    cgroups: Cgroups | None = None
    tenant_uids: range | None = None  # each tenant's jobs as its own user from this range (sandbox_users.py)
    log_max_bytes: int = 0  # a job's log is capped at this size (0: not capped)
    kill_foreign_after: float = 0.0  # seconds before a process on a GPU no lease holds is killed (0: never)
    address: str = ""  # where the other nodes of a gang reach this one (sent at registration)


class Agent:
    def __init__(self, *, settings: Settings, backend: GpuBackend, state: StateDir, client: Client) -> None:
        self.settings, self.backend, self.state, self.client = settings, backend, state, client
        self.inventory = {g.uuid: g for g in backend.inventory()}
        self.jobs: dict[int, Job] = {}
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.tails = usage.LogTails()
        self.guard = GpuGuard(
            state_root=state.root, backend=backend, kill_foreign_after=settings.kill_foreign_after
        )
        self.backoff = Backoff()
        self.health: list[GpuSample] = []
        self.boot_epoch = 0
        self.seq = 0
        self.registered = False
        self.server_state = "up"
        node = state.node()
        self.heartbeat_s = float(node.get("heartbeat_seconds", 15))
        now = time.monotonic()
        self.next_try = self.next_poll = self.next_heartbeat = self.next_sample = now
        self.stopping = False
        self._wake_r, self._wake_w = os.pipe()
        # Protocol 2 (set by the server's register answer)
        self.protocol = 1
        self.report_s = 10.0  # until the server's first answer says
        self.poll_s = float(LONG_POLL_MAX_S)
        self.next_report = now
        self.report_now = False  # an event that matters now: report without waiting for next_report
        self.poller: Poller | None = None

    # ------------------------------------------------------------------ start and stop
    def start(self) -> None:
        """Raise the boot epoch, adopt the jobs of the last run, register (StartupError when that cannot be)."""
        self.boot_epoch = self.state.new_boot_epoch()
        self.adopt()
        credential = self.state.credential
        if not credential and not self.settings.bootstrap_token:
            raise StartupError(
                f"no node credential in {self.state.root} and no bootstrap token "
                "(set GPUMARKET_BOOTSTRAP_TOKEN or --bootstrap-token-file)"
            )
        try:
            self.register()
        except Rejected as exc:
            raise StartupError(f"{self.settings.server} refused the registration: {exc}") from None
        except Unavailable as exc:
            if not credential:
                raise StartupError(f"cannot reach the server at {self.settings.server}: {exc}") from None
            # A known node goes on without the server: its jobs still need watching (docs/agent.md §Autonomy).
            log.warning("server unreachable at start (%s); running autonomously, registering later", exc)
            self._back_off()

    def install_signals(self) -> None:
        """SIGTERM and SIGINT end the loop after the current step; the jobs go on running."""
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self) -> None:
        while not self.stopping:
            try:
                self.local_step(time.time())
            except Exception:  # a daemon logs a fault and goes on; the next step tries again
                log.exception("local step failed")
                self.next_sample = time.monotonic() + self.settings.interval
            if self.stopping:
                break
            self.server_step()
            self._sleep(self._until_next())
        if self.poller is not None:
            self.poller.stopping.set()
        for job in self.jobs.values():
            self.state.save_job(job)
        log.info("stopping; %d job(s) left running, adopted at the next start", self.running_count())

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 and not self.stopping:
            ready, _, _ = select.select([self._wake_r], [], [], seconds)
            if ready:
                os.read(self._wake_r, 512)

    def _until_next(self) -> float:
        now = time.monotonic()
        if self.backoff.failures:
            server = self.next_try
        elif self.protocol == 2:
            server = now if self.report_now else self.next_report
        else:
            server = min(self.next_poll, self.next_heartbeat)
        return max(0.0, min(self._local_deadline(), server) - now)

    def _local_deadline(self) -> float:
        """The monotonic time of the next local duty: a sample, an expiry, the end of a grace period."""
        mono, wall = time.monotonic(), time.time()
        due = [self.next_sample]
        for job in self.jobs.values():
            if job.running and job.stopped_by is None:
                due.append(mono + job.started_at + job.max_seconds - wall)
            if job.running and job.kill_at is not None and not job.killed:
                due.append(mono + job.kill_at - wall)
        return min(due)

    def running_count(self) -> int:
        return sum(job.running for job in self.jobs.values())

    # ------------------------------------------------------------------ adoption
    def adopt(self) -> None:
        """Take over the jobs the last run started. A record without a pid was never started (the agent died
        while binding); its bind command comes again, because it was never acknowledged."""
        for lease, job in sorted(self.state.jobs().items()):
            if not job.pid:
                self.state.drop_job(lease)
                continue
            self.jobs[lease] = job
            if job.running:
                alive = jobs.is_alive(job)
                log.info(
                    "lease %d: job %s (pid %d) %s", lease, job.job, job.pid, "adopted" if alive else "ended"
                )

    # ------------------------------------------------------------------ local steps
    def local_step(self, now: float) -> None:
        ended = False
        for job in self.jobs.values():
            if not job.running:
                continue
            outcome = jobs.outcome(job, self.children.get(job.lease), now)
            self._cap_log(job)  # at its end too: a job that wrote fast and exited between two steps
            if outcome is not None:
                job.outcome = outcome
                usage.finish(job)
                self.children.pop(job.lease, None)
                sandbox_cgroups.remove(job.cgroups)
                ended = True
                log.info(
                    "lease %d: job ended: exit code %s, signal %s%s",
                    job.lease,
                    outcome.exit_code,
                    outcome.signal,
                    f" ({outcome.reason})" if outcome.reason else "",
                )
                continue
            if job.stopped_by is None and now >= job.started_at + job.max_seconds:
                log.info("lease %d: expired after %.0f s: SIGTERM", job.lease, job.max_seconds)
                jobs.stop(job, "expiry", now)
                self.state.save_job(job)
            if jobs.kill_due(job, now):
                log.info("lease %d: grace period over: SIGKILL", job.lease)
                self.state.save_job(job)
        if ended or time.monotonic() >= self.next_sample:
            self.sample(now)
        if ended:
            self.report_now = True  # a job that exited goes to the server at once (protocol 2)

    def _cap_log(self, job: Job) -> None:
        cap = job.log_max_bytes or self.settings.log_max_bytes
        if cap:
            dropped = sandbox_logs.cap(job.log_path, cap)
            if dropped:
                job.log_offset = max(0, job.log_offset - dropped)
                log.info("lease %d: log over its cap: the oldest %d bytes dropped", job.lease, dropped)

    def sample(self, now: float) -> None:
        """Sample every GPU, add to the counters and spool one report (on disk before it is ever sent)."""
        self.next_sample = time.monotonic() + self.settings.interval
        running = [job for job in self.jobs.values() if job.running]
        bound: dict[str, list[int]] = {}
        for job in running:
            for uuid in job.gpus:
                bound.setdefault(uuid, []).append(job.pid)
        self.health = self.backend.sample(bound)
        for pid in self.guard.foreign(self.health, set(usage.owners(self.health, running)), now):
            log.warning(
                "killed process %d: on a GPU no lease holds for %g s", pid, self.settings.kill_foreign_after
            )
        if self.guard.drained:
            self.guard.recheck({u for job in running for u in job.gpus})
        usage.measure(running, self.health, now)
        final = [j for j in self.jobs.values() if not j.running and j.final_report is None]
        for job in running + final:
            checkpoints.observe(job, now)
        self.seq += 1
        name = self.state.report_name(self.boot_epoch, self.seq)
        report = usage.report(
            boot_epoch=self.boot_epoch,
            seq=self.seq,
            now=now,
            samples=self.health,
            jobs=running + final,
        )
        self.state.spool_put(name, report)
        for job in final:
            job.final_report = name
            self.state.save_job(job)
        for job in running:
            self.state.save_job(job, durable=False)

    # ------------------------------------------------------------------ server steps
    def server_step(self) -> None:
        if time.monotonic() < self.next_try:
            return
        try:
            if not self.registered:
                self.register()
            if self.protocol == 2:
                self.take_commands()
                if self.report_now or time.monotonic() >= self.next_report:
                    self.send_reports()
                self._start_poller()
            else:
                self.send_acks()
                self.send_started()
                self.send_spool()
                self.send_exits()
                if time.monotonic() >= self.next_heartbeat:
                    self.heartbeat()
                if time.monotonic() >= self.next_poll:
                    self.fetch_commands()
        except Unavailable as exc:
            log.warning(
                "server unavailable: %s; retry %d in %.1f s", exc, self.backoff.failures + 1, self._back_off()
            )
            return
        except Rejected as exc:  # the credential revoked, the node deleted: nothing to do but ask again later
            self.backoff.failures = max(self.backoff.failures, 6)
            log.error("server refused the agent: %s; retrying in %.0f s", exc, self._back_off())
            return
        except Exception:  # an answer the agent cannot use: pushed back like an outage, never a crash loop
            log.exception("server step failed; retrying in %.1f s", self._back_off())
            return
        if self.backoff.failures:
            log.info("server reachable again")
        self.backoff.reset()
        self.next_try = time.monotonic()

    def _back_off(self) -> float:
        delay = self.backoff.next_delay()
        self.next_try = time.monotonic() + delay
        return delay

    def register(self) -> None:
        self.client.secret = self.state.credential or self.settings.bootstrap_token
        body = {
            "name": self.settings.name,
            "agent_version": VERSION,
            "gpus": [asdict(g) for g in self.inventory.values()],
            "capabilities": self.capabilities(),
        }
        if self.settings.address:
            body["address"] = self.settings.address
        answer = self.client.call("POST", "register", body)
        if answer.get("credential"):
            self.state.credential = answer["credential"]
            self.client.secret = answer["credential"]
        node = {k: answer.get(k) for k in ("node", "name", "heartbeat_seconds", "poll_seconds")}
        self.state.save_node(node)
        self.heartbeat_s = float(node["heartbeat_seconds"] or 15)
        self.registered = True
        if answer.get("protocol") == 2:
            self.protocol = 2
            self.poll_s = float(answer.get("poll_seconds") or self.poll_s)
            self.report_now = True  # the first report at once: it is the heartbeat that brings the node up
        else:
            self.protocol = 1
        log.info("registered as node %s (%s) with %d GPU(s)", node["node"], node["name"], len(self.inventory))

    def capabilities(self) -> dict[str, Any]:
        """What this node enforces on a job, said at registration and shown on the console's node page: the
        sandbox ("enforced" or why not), each cgroup limit, tenant users and the log cap."""
        s = self.settings
        cgroups = s.cgroups.capabilities() if s.cgroups else {"version": None, "limits": {}}
        return {
            "sandbox": "enforced" if s.sandbox else s.sandbox_off,
            "cgroup": cgroups["version"],
            "limits": cgroups["limits"],
            "tenant_users": "enforced" if s.tenant_uids else "off (one user for every tenant)",
            "log_max_bytes": s.log_max_bytes or None,
        }

    def send_acks(self) -> None:
        while self.state.meta.acks:
            ack = self.state.meta.acks[0]
            try:
                self.client.call(
                    "POST", f"commands/{ack['id']}/ack", {"result": ack["result"], "detail": ack["detail"]}
                )
            except Rejected as exc:
                log.error("command %s: acknowledgement refused: %s", ack["id"], exc)
            self.state.meta.acks.pop(0)
            self.state.save_meta()

    def send_started(self) -> None:
        for job in self.jobs.values():
            if not job.started_reported:
                try:
                    self.client.call("POST", f"leases/{job.lease}/started", {"at": usage.iso(job.started_at)})
                except Rejected as exc:
                    log.error("lease %d: start report refused: %s", job.lease, exc)
                job.started_reported = True
                self.state.save_job(job)

    def send_spool(self) -> None:
        for path in self.state.spooled():
            report: dict[str, Any] = read_json(path)
            # The log tail is read now, not spooled: the freshest tail, and a long outage does not fill the
            # disk with 64 KiB per job per sample. The server keeps the tail of the newest report.
            for counters in report["leases"]:
                counters["log_tail"] = self.tails.tail(str(self.state.job_paths(counters["lease"])[2]))
            try:
                self.client.call("POST", "usage", report)
            except Rejected as exc:  # kept aside for the operator; it must not block the reports behind it
                log.error("usage report %s refused: %s", path.name, exc)
                self.state.spool_reject(path)
                continue
            self.state.spool_done(path)

    def send_exits(self) -> None:
        for job in list(self.jobs.values()):
            if job.outcome is None or job.final_report is None or not job.started_reported:
                continue
            if (self.state.root / "spool" / job.final_report).exists():
                continue  # its last counters are not acknowledged yet
            sandbox_cgroups.remove(job.cgroups)  # again: a process may have lingered at the job's end
            body = {
                "at": usage.iso(job.outcome.ended_at),
                "exit_code": job.outcome.exit_code,
                "signal": job.outcome.signal,
                "reason": job.outcome.reason,
                "stopped_by": job.stopped_by,
                "usage": {**usage.lease_summary(job), "log_tail": self.tails.tail(job.log_path)},
            }
            try:
                self.client.call("POST", f"leases/{job.lease}/exited", body)
            except Rejected as exc:
                log.error("lease %d: exit report refused: %s", job.lease, exc)
            job.exit_reported = True
            self.state.retire_job(job)
            self.tails.forget(job.log_path)
            del self.jobs[job.lease]

    def heartbeat(self) -> None:
        gpus = self.guard.health(self.health)
        leases = sorted(job.lease for job in self.jobs.values() if job.running)
        events = list(self.guard.events)
        body = {"boot_epoch": self.boot_epoch, "gpus": gpus, "leases": leases}
        answer = self.client.call("POST", "heartbeat", {**body, "events": events} if events else body)
        self.guard.sent(len(events))
        state = answer.get("state", "up")
        if state != self.server_state:
            log.info("the server says this node is %s", state)
            self.server_state = state
        self.next_heartbeat = time.monotonic() + self.heartbeat_s

    def fetch_commands(self) -> None:
        mono = time.monotonic()
        wait = int(max(0.0, min(LONG_POLL_MAX_S, self._local_deadline() - mono, self.next_heartbeat - mono)))
        answer = self.client.call(
            "GET", f"commands?after={self.state.meta.last_command}&wait={wait}", wait=wait
        )
        # A poll that did not wait is not repeated at once: at most one a second.
        self.next_poll = time.monotonic() + (0.0 if wait else 1.0)
        self.handle_commands(answer.get("commands", []))

    def handle_commands(self, commands: list[dict[str, Any]]) -> None:
        for command in sorted(commands, key=lambda c: int(c["id"])):
            if int(command["id"]) <= self.state.meta.last_command:
                continue
            result, detail = self.apply(command)
            log.info(
                "command %s (%s, lease %s): %s %s",
                command["id"],
                command.get("kind"),
                command.get("lease"),
                result,
                detail,
            )
            self.state.meta.last_command = int(command["id"])
            self.state.meta.acks.append({"id": int(command["id"]), "result": result, "detail": detail[:500]})
            self.state.save_meta()
            if self.protocol == 2:
                # A bind that started or could not, a refusal: the server hears of it now; the rest (a stop
                # applied: its job's exit follows at once anyway) rides on the next report.
                if command.get("kind") == "bind" or result == "refused":
                    self.report_now = True
                continue
            self.send_acks()
            self.send_started()

    # ------------------------------------------------------------------ protocol 2
    def _start_poller(self) -> None:
        if self.poller is None or not self.poller.is_alive():
            self.poller = Poller(
                client=self.client,
                after=lambda: self.state.meta.last_command,
                poll_seconds=lambda: self.poll_s,
                wake_fd=self._wake_w,
            )
            self.poller.start()

    def take_commands(self) -> None:
        """Apply the commands the poll thread found; it polls again (after them) once they are handled."""
        if self.poller is None:
            return
        commands = self.poller.take()
        if commands:
            self.handle_commands(commands)
            self.poller.handled.set()

    def send_reports(self) -> None:
        """The report in the outbox (assembled before, not acknowledged), else a new one from the oldest
        spooled ticks; then, while ticks are left (a backlog after an outage), the next, one report per
        request, at most usage.MAX_TICKS ticks each, oldest first."""
        while True:
            pending = self.state.outbox() or self._assemble()
            body = self._report_body(pending)
            try:
                answer = self.client.call("POST", "report", body, compress=True)
            except Rejected as exc:  # kept aside for the operator; it must not block the reports behind it
                log.error("report %s/%s refused: %s", pending["boot_epoch"], pending["seq"], exc)
                self.state.outbox_reject()
                answer = {}
            else:
                self.state.outbox_done()
            self._reported(body, answer)
            if not self.state.spooled():
                return

    def _assemble(self) -> dict[str, Any]:
        ticks = usage.chunk([(p.name, read_json(p)) for p in self.state.spooled()[: usage.MAX_TICKS]])
        self.state.meta.report_seq += 1
        self.state.save_meta()
        report = {
            "boot_epoch": self.boot_epoch,
            "seq": self.state.meta.report_seq,
            "sent_at": usage.iso(time.time()),
            "ticks": [name for name, _ in ticks],
            "usage": usage.columns([tick for _, tick in ticks]),
            "leases": usage.newest_counters([tick for _, tick in ticks]),
        }
        self.state.outbox_put(report)
        return report

    def _report_body(self, pending: dict[str, Any]) -> dict[str, Any]:
        """The assembled part (samples and counters: the same on every try) and what is to say now."""
        leases = [
            {**c, "log_tail": self.tails.tail(str(self.state.job_paths(c["lease"])[2]))}
            for c in pending["leases"]
        ]
        spooled = {p.name for p in self.state.spooled()}
        exited = []
        for job in self.jobs.values():
            # After its final counters: their tick is in this report or an earlier one.
            if job.outcome is None or job.final_report is None or job.final_report in spooled:
                continue
            exited.append(
                {
                    "lease": job.lease,
                    "at": usage.iso(job.outcome.ended_at),
                    "exit_code": job.outcome.exit_code,
                    "signal": job.outcome.signal,
                    "reason": job.outcome.reason,
                    "stopped_by": job.stopped_by,
                    "usage": {**usage.lease_summary(job), "log_tail": self.tails.tail(job.log_path)},
                }
            )
        body: dict[str, Any] = {
            "protocol": 2,
            "boot_epoch": pending["boot_epoch"],
            "seq": pending["seq"],
            "sent_at": pending["sent_at"],
            "gpus": self.guard.health(self.health),
            "running": sorted(job.lease for job in self.jobs.values() if job.running),
            "events": list(self.guard.events),
            "acks": [
                {"command": a["id"], "result": a["result"], "detail": a["detail"]}
                for a in self.state.meta.acks
            ],
            "started": [
                {"lease": job.lease, "at": usage.iso(job.started_at)}
                for job in self.jobs.values()
                if not job.started_reported and job.pid
            ],
            "exited": exited,
            "leases": leases,
        }
        if pending.get("usage") is not None:
            body["usage"] = pending["usage"]
        return body

    def _reported(self, body: dict[str, Any], answer: dict[str, Any]) -> None:
        """The report is acknowledged (or refused and set aside): what it carried is said."""
        self.guard.sent(len(body["events"]))
        if body["acks"]:
            del self.state.meta.acks[: len(body["acks"])]
            self.state.save_meta()
        for started in body["started"]:
            job = self.jobs[started["lease"]]
            job.started_reported = True
            self.state.save_job(job)
        for exited in body["exited"]:
            job = self.jobs.pop(exited["lease"])
            sandbox_cgroups.remove(job.cgroups)  # again: a process may have lingered at the job's end
            job.exit_reported = True
            self.state.retire_job(job)
            self.tails.forget(job.log_path)
        for part in ("ignored", "refused"):
            if answer.get(part):
                log.warning("report %s: the server %s %s", body["seq"], part, answer[part])
        state = answer.get("state", self.server_state)
        if state != self.server_state:
            log.info("the server says this node is %s", state)
            self.server_state = state
        self.report_s = float(answer.get("report_seconds") or self.report_s)
        self.poll_s = float(answer.get("poll_seconds") or self.poll_s)
        self.report_now = False
        self.next_report = time.monotonic() + self.report_s

    # ------------------------------------------------------------------ commands
    def apply(self, command: dict[str, Any]) -> tuple[str, str]:
        """("applied" | "refused", detail). Fenced: a command from before a fence already applied is stale
        (the round that wrote it was superseded); an expired one is too late to act on."""
        meta = self.state.meta
        try:
            fence = int(command.get("fence") or 0)
            if fence < meta.fence:
                raise Refuse(f"fence {fence} is below the highest applied fence {meta.fence}")
            expires = command.get("expires_at")
            if expires and datetime.fromisoformat(expires).timestamp() < time.time():
                raise Refuse(f"expired at {expires}")
            payload = command.get("payload") or {}
            kind = command.get("kind")
            if kind == "bind":
                detail = self.bind(payload)
            elif kind in ("preempt", "release"):
                detail = self.stop_lease(int(payload.get("lease") or command["lease"]), kind, payload)
            else:
                raise Refuse(f"unknown command kind {kind!r}")
        except Refuse as exc:
            return "refused", str(exc)
        except (KeyError, TypeError, ValueError) as exc:
            return "refused", f"malformed command: {type(exc).__name__}: {exc}"
        meta.fence = max(meta.fence, fence)
        return "applied", detail

    def bind(self, payload: dict[str, Any]) -> str:
        lease = int(payload["lease"])
        if self.state.knows(lease):
            return "already bound"
        try:
            argv = shlex.split(str(payload["command"]))
        except ValueError as exc:
            raise Refuse(f"command cannot be split into arguments: {exc}") from None
        if not argv:
            raise Refuse("command is empty")
        gpus = [str(u) for u in payload["gpus"] if u in self.inventory]
        if not gpus:
            raise Refuse("none of the lease's GPUs is on this node")
        busy = {u for j in self.jobs.values() if j.running and j.kill_at is None for u in j.gpus} & set(gpus)
        if busy:
            log.warning("lease %d: GPUs %s are still held by a running job", lease, sorted(busy))
        run, exit_path, log_path = self.state.job_paths(lease)
        tenant = str(payload.get("tenant") or "")
        held = {u for j in self.jobs.values() if j.running for u in j.gpus} & set(gpus)
        if held and tenant:
            log.warning(
                "lease %d: GPUs %s still in a job's grace period: not checked now", lease, sorted(held)
            )
        try:
            self.guard.before_bind(gpus, tenant, held)
        except GpuDrained as exc:
            raise Refuse(str(exc)) from None
        run_as = list(self.settings.job_user) if self.settings.job_user else None
        if self.settings.tenant_uids is not None and tenant:
            try:
                run_as = list(tenant_user(tenant, self.settings.tenant_uids))
            except NoTenantUser as exc:
                raise Refuse(str(exc)) from None
        job = Job(
            lease=lease,
            job=int(payload["job"]),
            name=str(payload.get("name", "")),
            argv=argv,
            gpus=gpus,
            max_seconds=float(payload["max_seconds"]),
            grace_seconds=float(payload.get("grace_seconds", 30)),
            checkpoint_dir=str(self.settings.checkpoint_root / str(int(payload["job"]))),
            work_dir=str(run / "work"),
            log_path=str(log_path),
            exit_path=str(exit_path),
            run_as=run_as,
            sandboxed=self.settings.sandbox is not None,
            tenant=tenant,
            log_max_bytes=max(65536, int(payload.get("log_max_bytes") or 0))
            if payload.get("log_max_bytes")
            else 0,
            gang=bind_gang(payload.get("gang")),
        )
        minors = [self.inventory[u].index for u in gpus]
        self.state.save_job(job)  # before the spawn: a crash in between leaves a record without a pid
        try:
            job.cgroups = self._cgroups(lease, payload)
            self.children[lease] = jobs.spawn(job, self.settings.sandbox, minors)
        except OSError as exc:
            sandbox_cgroups.remove(job.cgroups)
            self.state.drop_job(lease)
            raise Refuse(f"cannot start the job: {exc}") from None
        self.jobs[lease] = job
        self.state.save_job(job)
        return f"started as pid {job.pid}"

    def _cgroups(self, lease: int, payload: dict[str, Any]) -> list[str]:
        """The job's cgroups with its limits: cpus and memory_mb are the part's totals from the bind (the
        server sizes them from the job's request per GPU and the policy); pids the bind's, else DEFAULT_PIDS."""
        if self.settings.cgroups is None or not self.settings.cgroups.roots:
            return []
        cpus = payload.get("cpus")
        memory_mb = payload.get("memory_mb")
        limits = Limits(
            cpus=float(cpus) if cpus else None,
            memory_bytes=int(memory_mb) * MIB if memory_mb else None,
            pids=int(payload.get("pids") or DEFAULT_PIDS),
        )
        # Named by the state directory too: two agents on one machine (the demo, the tests) share the hierarchy.
        agent = hashlib.sha256(str(self.state.root.resolve()).encode()).hexdigest()[:8]
        return self.settings.cgroups.create(f"{agent}-lease-{lease}", limits)

    def stop_lease(self, lease: int, kind: str, payload: dict[str, Any]) -> str:
        job = self.jobs.get(lease)
        if job is None:
            if self.state.knows(lease):
                return "the job had already exited"
            raise Refuse(f"no job for lease {lease} on this node")
        if not job.running:
            return "the job had already exited"
        grace = float(payload.get("grace_seconds", job.grace_seconds))
        jobs.stop(job, kind, time.time(), grace)
        self.state.save_job(job)
        return f"SIGTERM sent; SIGKILL if still running after {grace:g} s"
