-- Sessions as append-only event logs. State is a fold over the log; snapshots
-- cache that fold every N events. App and user state are shared by sessions and
-- kept materialized, updated in the same statement as the event that changes them.
-- Times are seconds since the Unix epoch (double precision).

CREATE TABLE schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  double precision NOT NULL
);

CREATE TABLE sessions (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- never reused
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    initial_state  text NOT NULL,                    -- session-scoped state given at creation (JSON)
    last_seq       bigint NOT NULL DEFAULT 0,        -- the fence: an append must name it
    create_time    double precision NOT NULL,
    update_time    double precision NOT NULL,
    UNIQUE (app_name, user_id, session_id)
);

CREATE INDEX sessions_by_update ON sessions (app_name, update_time);

CREATE TABLE events (
    session_pk     bigint NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    seq            bigint NOT NULL,                  -- 1, 2, 3... per session: append order
    event_id       text NOT NULL,
    invocation_id  text NOT NULL,
    author         text NOT NULL,
    timestamp      double precision NOT NULL,
    delta          text,                             -- session-scoped state delta (JSON) or NULL
    data           text NOT NULL,                    -- the whole event (JSON text: cheaper than jsonb, never queried inside)
    PRIMARY KEY (session_pk, seq),
    UNIQUE (session_pk, event_id)
);

CREATE INDEX events_by_invocation ON events (session_pk, invocation_id);

CREATE TABLE state_snapshots (
    session_pk  bigint NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    seq         bigint NOT NULL,                     -- the fold of events 1..seq
    state       text NOT NULL,
    PRIMARY KEY (session_pk, seq)
);

CREATE TABLE app_state (
    app_name     text PRIMARY KEY,
    state        jsonb NOT NULL,                     -- jsonb: '||' merges a delta in place, as dict.update does
    update_time  double precision NOT NULL
);

CREATE TABLE user_state (
    app_name     text NOT NULL,
    user_id      text NOT NULL,
    state        jsonb NOT NULL,
    update_time  double precision NOT NULL,
    PRIMARY KEY (app_name, user_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (1, 'sessions', extract(epoch FROM clock_timestamp()));
-- The run ledger: one row per drive of an invocation, written before ADK is
-- called. Leases and back-off use the database clock. 'epoch' is the fencing
-- token: every claim bumps it, and every write made for the run names it.

CREATE TABLE runs (
    pk               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- queue order
    run_id           text NOT NULL UNIQUE,
    app_name         text NOT NULL,
    user_id          text NOT NULL,
    session_id       text NOT NULL,
    invocation_id    text NOT NULL,
    request          text NOT NULL,                      -- the message (JSON), so a run that never started can be replayed
    status           text NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'PAUSED', 'DONE', 'FAILED', 'PARKED')),
    owner            text,
    lease_until      double precision NOT NULL,
    epoch            bigint NOT NULL DEFAULT 0,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  double precision NOT NULL DEFAULT 0,
    last_error       text,
    classification   text,
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL,
    finished_at      double precision
);

-- At most one RUNNING run per session, across every worker.
CREATE UNIQUE INDEX runs_one_running_per_session
    ON runs (app_name, user_id, session_id) WHERE status = 'RUNNING';
CREATE INDEX runs_by_lease ON runs (status, lease_until);
CREATE INDEX runs_by_session ON runs (app_name, user_id, session_id, pk);

CREATE TABLE dead_letters (
    pk              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text NOT NULL,                       -- 'run' (later: 'compensation', ...)
    run_id          text,
    request         text,
    classification  text,
    last_events     text,                                -- JSON array of the last events
    error           text NOT NULL,
    created_at      double precision NOT NULL
);

CREATE INDEX dead_letters_by_run ON dead_letters (run_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (2, 'runs', extract(epoch FROM clock_timestamp()));
-- The side-effect journal: one row per outside effect, keyed by what the
-- effect IS (send-invoice:INV-77), never by the function call id. INTENT is
-- written before acting, DONE (with the result) after. Writes made for a run
-- carry its fencing epoch.

CREATE TABLE journal (
    key               text PRIMARY KEY,
    tool_name         text NOT NULL,
    status            text NOT NULL CHECK (status IN ('INTENT', 'DONE')),
    result            text,                          -- JSON, set with DONE
    run_id            text,
    run_epoch         bigint,
    invocation_id     text,
    function_call_id  text,
    created_at        double precision NOT NULL,
    updated_at        double precision NOT NULL
);

CREATE INDEX journal_by_invocation ON journal (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (3, 'journal', extract(epoch FROM clock_timestamp()));
-- Long-running jobs: one row per long-running call, joining three facts that
-- arrive separately: the job (its id is the work's business identity, such as
-- report:2026-Q3:EMEA), the call it answers (session, invocation, function call
-- id) and its result. Only the first terminal result is kept. A row whose state
-- is terminal and whose call is known is answered once: a resumer claims it
-- under a lease (resume_owner, resume_epoch, resume_until) and records the run
-- that carries the answer (resume_run_id, resumed_at). Times are database clock.

CREATE TABLE jobs (
    job_id            text PRIMARY KEY,
    tool_name         text NOT NULL,
    request           text,                          -- the call's arguments (JSON)
    app_name          text,                          -- the call, filled by attach (only if empty)
    user_id           text,
    session_id        text,
    invocation_id     text,
    function_call_id  text,
    state             text NOT NULL CHECK (state IN ('STARTED', 'SUCCEEDED', 'FAILED', 'EXPIRED', 'CANCELLED')),
    result            text,                          -- JSON, set with the terminal state
    progress          text,                          -- JSON, the last progress reported
    progress_at       double precision,
    progress_sent     text,                          -- JSON, the last progress delivered
    progress_sent_at  double precision,
    deadline_at       double precision NOT NULL,
    submitted_at      double precision,              -- the work was handed over (at most once)
    resume_owner      text,
    resume_epoch      bigint NOT NULL DEFAULT 0,
    resume_until      double precision,
    resume_run_id     text,
    resumed_at        double precision,
    created_at        double precision NOT NULL,
    updated_at        double precision NOT NULL,
    completed_at      double precision
);

-- The resumer's scan: terminal rows not yet handed to a run.
CREATE INDEX jobs_ready ON jobs (completed_at) WHERE state <> 'STARTED' AND resumed_at IS NULL;
-- The expiry sweep and the progress sender: open rows.
CREATE INDEX jobs_open ON jobs (deadline_at) WHERE state = 'STARTED';
CREATE INDEX jobs_by_invocation ON jobs (invocation_id);
CREATE INDEX jobs_by_session ON jobs (app_name, user_id, session_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (4, 'jobs', extract(epoch FROM clock_timestamp()));
-- The saga ledger: a saga's steps, written durably before the events that
-- report them, so a saga whose process died can still be finished: every
-- action that may have happened is found and compensated, newest first.

CREATE TABLE sagas (
    saga_id        text PRIMARY KEY,                  -- '<invocation id>/<saga name>'
    name           text NOT NULL,
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    invocation_id  text NOT NULL,
    status         text NOT NULL CHECK (status IN ('RUNNING', 'COMPENSATING', 'COMMITTED',
                                                   'COMPENSATED', 'COMPENSATION_FAILED')),
    reason         text,
    owner          text,                              -- the saga sweeper holding it
    lease_until    double precision NOT NULL DEFAULT 0,
    failed_at      double precision,                              -- when compensation began
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    finished_at    double precision
);

CREATE INDEX sagas_by_status ON sagas (status, updated_at);
CREATE INDEX sagas_by_invocation ON sagas (invocation_id);

CREATE TABLE saga_steps (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- start order: compensation runs newest first
    saga_id        text NOT NULL REFERENCES sagas (saga_id) ON DELETE CASCADE,
    step           text NOT NULL,
    status         text NOT NULL CHECK (status IN ('PENDING', 'DONE', 'COMPENSATED',
                                                   'COMPENSATION_FAILED')),
    action_key     text NOT NULL,                      -- idempotency key of the action
    comp_key       text NOT NULL,                      -- idempotency key of its compensation
    record         text,                               -- what the compensator needs (JSON), set with DONE
    attempts       integer NOT NULL DEFAULT 0,         -- compensation attempts
    last_error     text,
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    UNIQUE (saga_id, step)
);

-- The saga sweeper asks whether a saga's run is still live.
CREATE INDEX runs_by_invocation ON runs (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (5, 'sagas', extract(epoch FROM clock_timestamp()));
-- Artifacts: ADK's files (reports, images) kept in the durable store with
-- every version, so a recovered run finds what its earlier steps saved.
-- Session-scoped artifacts carry their session id; user-scoped ones
-- ("user:..." file names) carry ''. A version written inside a run names the
-- run and its epoch: once the run was taken over the write is refused.

CREATE TABLE artifacts (
    app_name         text NOT NULL,
    user_id          text NOT NULL,
    session_id       text NOT NULL,                   -- '' for user-scoped artifacts
    filename         text NOT NULL,
    version          bigint NOT NULL,                 -- 0, 1, 2, ... per file
    part             text NOT NULL,                   -- the google.genai Part, JSON
    mime_type        text,
    custom_metadata  text NOT NULL DEFAULT '{}',      -- JSON object
    digest           text NOT NULL,                   -- sha256 of part: a re-driven save is recognised
    run_id           text,
    run_epoch        bigint,
    invocation_id    text,
    created_at       double precision NOT NULL,
    PRIMARY KEY (app_name, user_id, session_id, filename, version)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (6, 'artifacts', extract(epoch FROM clock_timestamp()));
-- Long-running jobs, part two: a submission is retried until the outside
-- system accepts it, and every call that attached to a job is answered.
--
-- submitted_at now means "accepted": it is set after submit() returned, not
-- before. Until then a submitter retries: submit_after is when the next
-- attempt may start (the running attempt's lease, then the back-off after a
-- failure), submit_attempts counts the attempts and submit_error keeps the
-- last failure. The job id is the idempotency key downstream, so an attempt
-- repeated after a crash is harmless.
ALTER TABLE jobs ADD COLUMN submit_attempts bigint NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN submit_after double precision;
ALTER TABLE jobs ADD COLUMN submit_error text;

-- The submitter's scan: open rows whose work is not yet accepted.
CREATE INDEX jobs_unsubmitted ON jobs (submit_after) WHERE state = 'STARTED' AND submitted_at IS NULL;

-- A job's first call is on its row. Every other call that attached to the same
-- job (another call id with the same business identity, maybe in another
-- invocation or session) is a row here, with a resume claim of its own, and is
-- answered once when the job ends.
CREATE TABLE job_calls (
    job_id            text NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    app_name          text NOT NULL,
    user_id           text NOT NULL,
    session_id        text NOT NULL,
    invocation_id     text NOT NULL,
    function_call_id  text NOT NULL,
    resume_owner      text,
    resume_epoch      bigint NOT NULL DEFAULT 0,
    resume_until      double precision,
    resume_run_id     text,
    resumed_at        double precision,
    created_at        double precision NOT NULL,
    PRIMARY KEY (job_id, app_name, user_id, session_id, function_call_id)
);

-- The resumer's scan: calls not yet handed to a run.
CREATE INDEX job_calls_open ON job_calls (job_id) WHERE resumed_at IS NULL;
CREATE INDEX job_calls_by_invocation ON job_calls (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (7, 'job_calls', extract(epoch FROM clock_timestamp()));
-- Saga writes fenced like session appends (issue 15). A step remembers the run
-- and epoch that recorded it, so a compensation can tell whether a step that
-- died PENDING may still act (a zombie mid-call); a saga finished by the saga
-- sweeper is 'unrecorded' until its outcome event is in the session.
-- (Assigned number: 0009; numbered here after the last migration of this branch.)

-- The run that recorded a step, and its epoch then.
ALTER TABLE saga_steps ADD COLUMN run_id text;
ALTER TABLE saga_steps ADD COLUMN run_epoch bigint;
-- 1: a saga sweeper finished the saga and still owes its outcome event.
ALTER TABLE sagas ADD COLUMN unrecorded integer NOT NULL DEFAULT 0;

INSERT INTO schema_version (version, name, applied_at)
VALUES (8, 'saga_fences', extract(epoch FROM clock_timestamp()));
-- Journal entries are owned: an INTENT names the attempt acting on it
-- (holder, a token per Journal.execute call) besides its run and epoch. An
-- intent is abandoned only when its run is no longer RUNNING at that epoch,
-- when its holder released it (the act raised), or, for an attempt outside any
-- run, when its hold (held_until, database clock, renewed while acting) ran
-- out. Rows written before this migration have no holder: they read as
-- released, which is how every INTENT was read until now.

ALTER TABLE journal ADD COLUMN holder text;
ALTER TABLE journal ADD COLUMN held_until double precision;

INSERT INTO schema_version (version, name, applied_at)
VALUES (9, 'journal_owners', extract(epoch FROM clock_timestamp()));
-- Operator control (issue 14): a CANCELLED status, cancel requests on a run,
-- and the audit trail of what people did to runs.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('QUEUED', 'RUNNING', 'PAUSED', 'DONE', 'FAILED', 'PARKED', 'CANCELLED'));
ALTER TABLE runs ADD COLUMN cancel_requested_at double precision;  -- an operator asked the owner to stop
ALTER TABLE runs ADD COLUMN cancel_requested_by text;

-- Who did what to a run, when and why (cancel, resolve, abandon, retry, answer).
CREATE TABLE operator_actions (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         text NOT NULL,
    app_name       text NOT NULL,
    action         text NOT NULL,                         -- cancel, resolve, abandon, retry, answer
    actor          text NOT NULL,                         -- who
    reason         text,                                  -- why
    status_before  text NOT NULL,
    status_after   text NOT NULL,
    epoch          bigint NOT NULL,                       -- the run's epoch after the action
    detail         text,                                  -- JSON: the operator's result, the cancel outcome...
    created_at     double precision NOT NULL              -- database clock
);

CREATE INDEX operator_actions_by_run ON operator_actions (run_id, pk);
CREATE INDEX operator_actions_by_app ON operator_actions (app_name, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (10, 'operator', extract(epoch FROM clock_timestamp()));
-- Operator control, second part (issue 14): who resolved a journaled effect by
-- hand, and the interrupts inbox: one row per human-input or long-running call
-- a run paused on, written when the run pauses, answered at most once.

-- The operator who recorded a journaled effect's result by hand.
ALTER TABLE journal ADD COLUMN resolved_by text;

CREATE TABLE interrupts (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call_id        text NOT NULL,                          -- the function call waiting for its answer
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    invocation_id  text NOT NULL,
    run_id         text NOT NULL,                          -- the run that paused on it
    kind           text NOT NULL CHECK (kind IN ('confirmation', 'input', 'long_running')),
    name           text NOT NULL,                          -- the call's function name
    args           text,                                   -- JSON: the call's arguments (hint, payload, original call)
    status         text NOT NULL CHECK (status IN ('OPEN', 'ANSWERED', 'EXPIRED', 'CLOSED')),
    deadline_at    double precision,                       -- the default outcome (deny) applies after it (database clock)
    answered_by    text,                                   -- who answered (or 'deadline')
    answer         text,                                   -- JSON: the function response sent
    answer_run_id  text,                                   -- the run that carries the answer on
    answered_at    double precision,
    created_at     double precision NOT NULL
);

CREATE UNIQUE INDEX interrupts_by_call ON interrupts (app_name, user_id, session_id, invocation_id, call_id);
CREATE INDEX interrupts_open ON interrupts (status, deadline_at);
CREATE INDEX interrupts_by_call_id ON interrupts (call_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (11, 'operator2_interrupts', extract(epoch FROM clock_timestamp()));
-- Recovery sweepers (issue 12): one row per sweeper (app, worker), stamped by
-- the database clock at the end of each pass, so a runner can tell whether any
-- process recovers its app's runs and say so when none does.

CREATE TABLE sweepers (
    app_name       text NOT NULL,
    worker_id      text NOT NULL,
    interval_s     double precision,                      -- seconds between its passes; NULL: a one-off pass (durable-adk recover)
    last_sweep_at  double precision NOT NULL,             -- database clock
    PRIMARY KEY (app_name, worker_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (12, 'adoption_sweepers', extract(epoch FROM clock_timestamp()));
-- Each pause takes one answer, whoever sends it (issue 14): a claim per asked
-- interrupt, written in the same unit of work as the run that carries the
-- answer. Two answers to one pause sent at the same instant both pass the
-- session check; the claim's key lets only one of them in. A call id a loop
-- asks again is a new pause: `ask` counts the times the invocation asked it.

CREATE TABLE answer_claims (
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    invocation_id  text NOT NULL,
    call_id        text NOT NULL,
    ask            integer NOT NULL,                          -- 1 for the first time the call was asked
    run_id         text NOT NULL,                          -- the run that carries the answer
    created_at     double precision NOT NULL,
    PRIMARY KEY (app_name, user_id, session_id, invocation_id, call_id, ask)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (13, 'answer_claims', extract(epoch FROM clock_timestamp()));

-- Durable sleep (issue 26): a timer is a job whose result is known in advance
-- and which becomes ready at its due time (deadline_at, database clock). The
-- wake pass completes due timers (job_wake) and the job resumer answers their
-- calls, and the expiry sweep leaves timers alone. One partial index keeps the
-- wake claim one indexed statement however many runs sleep.

-- timer = 1: the wake-up of a durable sleep
ALTER TABLE jobs ADD COLUMN timer integer NOT NULL DEFAULT 0;
CREATE INDEX jobs_timers_due ON jobs (deadline_at) WHERE state = 'STARTED' AND timer = 1;

INSERT INTO schema_version (version, name, applied_at)
VALUES (14, 'timers', extract(epoch FROM clock_timestamp()));

-- Schedules (issue 26): a row per schedule an app declares, as last synced
-- from its code, with its next tick and when a worker should next look at it;
-- a row per tick, keyed by (app, schedule, tick key), written with the id of
-- the run it starts chosen in advance, so a tick is fired exactly once.

CREATE TABLE schedules (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_name       text NOT NULL,
    name           text NOT NULL,
    spec           text NOT NULL,                         -- the definition (JSON) as last synced from code
    next_tick_at   double precision NOT NULL,             -- the next tick not yet recorded (UTC seconds)
    next_fire_at   double precision NOT NULL,             -- when a worker should next claim it (database clock)
    paused         integer NOT NULL DEFAULT 0,
    orphaned_at    double precision,                      -- when a sync found it gone from the code
    epoch          bigint NOT NULL DEFAULT 0,             -- bumped by every claim and every change
    owner          text,                                  -- the worker of the last claim
    last_tick_at   double precision,                      -- the last tick recorded
    last_run_id    text,                                  -- the run of the last tick submitted
    missed         bigint NOT NULL DEFAULT 0,             -- ticks not fired by the catch-up policy
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    UNIQUE (app_name, name)
);

-- The poller's one claim: due schedules of an app, in order of their time.
CREATE INDEX schedules_due ON schedules (app_name, next_fire_at)
    WHERE paused = 0 AND orphaned_at IS NULL;

CREATE TABLE schedule_ticks (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_name       text NOT NULL,
    schedule_name  text NOT NULL,
    tick_key       text NOT NULL,                         -- 'at:<UTC time>' or 'trigger:<id>'
    tick_at        double precision NOT NULL,             -- the tick's time (UTC seconds)
    kind           text NOT NULL CHECK (kind IN ('tick', 'trigger')),
    run_id         text NOT NULL UNIQUE,                  -- chosen when the tick is recorded
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    state          text NOT NULL CHECK (state IN ('PENDING', 'SUBMITTED', 'SKIPPED')),
    actor          text,                                  -- who triggered it (trigger ticks)
    detail         text,                                  -- why it was skipped
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    UNIQUE (app_name, schedule_name, tick_key)
);

CREATE INDEX schedule_ticks_open ON schedule_ticks (app_name, schedule_name, tick_at)
    WHERE state = 'PENDING';
CREATE INDEX schedule_ticks_recent ON schedule_ticks (app_name, schedule_name, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (15, 'schedules', extract(epoch FROM clock_timestamp()));

-- Versioned runs (issue 25): every run, job, saga and interrupt records the
-- app version it was started under (the version string the app declares and a
-- fingerprint of its definition); a sweeper says which version it serves; an
-- operator may drain a version. NULL: recorded before versions existed, or by
-- an app that declares none.

ALTER TABLE runs ADD COLUMN app_version text;
ALTER TABLE runs ADD COLUMN app_fingerprint text;
ALTER TABLE jobs ADD COLUMN app_version text;
ALTER TABLE jobs ADD COLUMN app_fingerprint text;
ALTER TABLE sagas ADD COLUMN app_version text;
ALTER TABLE sagas ADD COLUMN app_fingerprint text;
ALTER TABLE interrupts ADD COLUMN app_version text;
ALTER TABLE interrupts ADD COLUMN app_fingerprint text;
-- What a sweeper's worker serves: its own version and the earlier ones it continues (JSON array).
ALTER TABLE sweepers ADD COLUMN app_version text;
ALTER TABLE sweepers ADD COLUMN app_fingerprint text;
ALTER TABLE sweepers ADD COLUMN serves text;

-- `durable-adk versions` counts runs by version and status.
CREATE INDEX runs_by_version ON runs (app_name, app_version, status);

-- Versions an operator drained: no new run starts on them; their runs finish.
CREATE TABLE app_versions (
    app_name     text NOT NULL,
    app_version  text NOT NULL,
    drained_at   double precision,                                    -- database clock; NULL: taking runs
    drained_by   text,
    reason       text,
    PRIMARY KEY (app_name, app_version)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (16, 'versions', extract(epoch FROM clock_timestamp()));
-- Drift of compensators (issue 25): each saga step records whether the code
-- that began it could undo it (1: it had a compensator; 0: the stage was
-- uncompensatable). A worker whose code lacks the compensator of a step
-- recorded 1 and not yet undone parks the run or leaves the saga for code that
-- has it, before it undoes anything. NULL: recorded before this migration
-- (not compared).

ALTER TABLE saga_steps ADD COLUMN compensatable boolean;

INSERT INTO schema_version (version, name, applied_at)
VALUES (17, 'saga_compensators', extract(epoch FROM clock_timestamp()));

-- Unreadable events and racing operators (issue 47).

-- An abandoned run says so in its own row. A second abandon, or a retry, that
-- waited for the abandon's lock re-checks the row it waited for; PostgreSQL
-- re-reads that row, not the other tables its conditions read (those keep the
-- statement's snapshot), so "not abandoned" must be a column of the row for
-- abandon to stay final and be recorded once.
ALTER TABLE runs ADD COLUMN abandoned_at double precision;

UPDATE runs
   SET abandoned_at = (SELECT min(a.created_at) FROM operator_actions a
                        WHERE a.run_id = runs.run_id AND a.action = 'abandon')
 WHERE EXISTS (SELECT 1 FROM operator_actions a
                WHERE a.run_id = runs.run_id AND a.action = 'abandon');

-- How many times an operator rewrote an event of the session (a repair of an
-- event the reader cannot parse): a copy of the log cached before is dropped.
ALTER TABLE sessions ADD COLUMN repairs bigint NOT NULL DEFAULT 0;

-- The audit of event repairs: who, when, why, and the event as it was stored.
CREATE TABLE event_repairs (
    pk           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_name     text NOT NULL,
    user_id      text NOT NULL,
    session_id   text NOT NULL,
    seq          bigint NOT NULL,
    event_id     text NOT NULL,
    action       text NOT NULL,                  -- drop, replace
    actor        text NOT NULL,                  -- who
    reason       text,                           -- why
    original     text NOT NULL,                  -- the event's row data as it was stored
    replacement  text NOT NULL,                  -- the readable stand-in written in its place
    created_at   double precision NOT NULL       -- database clock
);

CREATE INDEX event_repairs_by_session ON event_repairs (app_name, user_id, session_id, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (18, 'reads_and_races', extract(epoch FROM clock_timestamp()));
-- Schedules belong to a version, and who serves is who is alive (issue 41).
-- A schedule row records the app version whose code last synced it (NULL:
-- an unversioned app, or synced before this migration); schedule_sets holds,
-- per app, the version whose declared set is in force, a digest of that set
-- and an epoch every sync bumps, so two syncs never interleave and a worker
-- notices in one read that the set changed. workers holds the serving
-- processes' beats (`durable-adk versions` lists who serves): a stopped
-- worker leaves (left_at), a killed one stops beating.

ALTER TABLE schedules ADD COLUMN app_version text;

CREATE TABLE schedule_sets (
    app_name     text PRIMARY KEY,
    app_version  text,                                    -- the version whose set is in force; NULL: unversioned
    digest       text NOT NULL,                           -- of that set's definitions
    epoch        bigint NOT NULL,                         -- bumped by every sync
    synced_by    text,                                    -- the worker of the last sync
    synced_at    double precision NOT NULL                -- database clock
);

CREATE TABLE workers (
    app_name         text NOT NULL,
    worker_id        text NOT NULL,
    app_version      text,
    app_fingerprint  text,
    serves           text,                                -- the versions whose runs it takes (JSON array)
    beat_s           double precision NOT NULL,           -- seconds between its beats
    last_beat_at     double precision NOT NULL,           -- database clock
    started_at       double precision NOT NULL,
    left_at          double precision,                    -- when it stopped serving; NULL: serving
    PRIMARY KEY (app_name, worker_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (19, 'schedule_versions', extract(epoch FROM clock_timestamp()));
-- Drift of key templates (issue 41): a journal entry records the key template
-- of the tool that wrote it (@journaled's key=, e.g. 'charge:{order_id}'). A
-- worker whose code keys the same tool with another template parks a run
-- whose journal holds such an entry before anything acts: a re-drive would
-- compute a new key, find no entry and act a second time. NULL: written before
-- this migration, or by an act with no template (a saga stage); such entries
-- are compared by the key the new code computes from the call's arguments.

ALTER TABLE journal ADD COLUMN key_template text;

INSERT INTO schema_version (version, name, applied_at)
VALUES (20, 'journal_key_templates', extract(epoch FROM clock_timestamp()));

-- Encryption at rest (issue 43): users' own data keys, for crypto-shredding.
-- A user's data key is random and stored only wrapped (sealed by a keyring
-- key, whose id is wrap_key); the keyring keys themselves are never stored.
-- key_ref is the id the user's sealed values name. Destroying a row
-- (shred_user) leaves every value sealed under its key unreadable.

CREATE TABLE user_keys (
    app_name    text NOT NULL,
    user_id     text NOT NULL,
    key_ref     text NOT NULL UNIQUE,                 -- 'u-' + random hex: what sealed values name
    wrap_key    text NOT NULL,                        -- the keyring key that wraps it
    wrapped     text NOT NULL,                        -- nonce + AES-GCM of the data key (base64)
    created_at  double precision NOT NULL,
    PRIMARY KEY (app_name, user_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (21, 'user_keys', extract(epoch FROM clock_timestamp()));

-- Durable A2A (issue 44): tasks, their events, their runs, message ids, push configs.
CREATE TABLE a2a_tasks (
    task_id     text PRIMARY KEY,
    app_name    text NOT NULL,
    owner       text NOT NULL,                        -- who may read it ('' when unauthenticated)
    context_id  text NOT NULL,                        -- the session
    state       text NOT NULL,                        -- TASK_STATE_*, as in the body
    version     bigint NOT NULL,                      -- 1 at the first save, +1 at each
    body        text NOT NULL,                        -- the Task (protobuf JSON)
    created_at  double precision NOT NULL,
    updated_at  double precision NOT NULL
);
CREATE INDEX a2a_tasks_by_context ON a2a_tasks (app_name, owner, context_id, updated_at);
CREATE INDEX a2a_tasks_by_state ON a2a_tasks (app_name, state);

CREATE TABLE a2a_task_events (
    task_id     text NOT NULL,
    version     bigint NOT NULL,                      -- the task's version this event made
    body        text NOT NULL,                        -- a StreamResponse (protobuf JSON)
    created_at  double precision NOT NULL,
    PRIMARY KEY (task_id, version)
);

CREATE TABLE a2a_task_runs (
    task_id        text NOT NULL,
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    invocation_id  text NOT NULL,
    created_at     double precision NOT NULL,
    PRIMARY KEY (task_id, invocation_id)
);
CREATE INDEX a2a_task_runs_by_invocation ON a2a_task_runs (invocation_id);

CREATE TABLE a2a_messages (
    app_name    text NOT NULL,
    owner       text NOT NULL,
    context_id  text NOT NULL,                        -- as the client sent it ('' for none)
    message_id  text NOT NULL,
    task_id     text NOT NULL,
    nonce       text NOT NULL,                        -- the taker's own mark: it took the id
    created_at  double precision NOT NULL,
    PRIMARY KEY (app_name, owner, context_id, message_id)
);

CREATE TABLE a2a_push_configs (
    task_id     text NOT NULL,
    owner       text NOT NULL,
    config_id   text NOT NULL,
    body        text NOT NULL,                        -- the TaskPushNotificationConfig (protobuf JSON)
    created_at  double precision NOT NULL,
    PRIMARY KEY (task_id, owner, config_id)
);

CREATE TABLE a2a_push_outbox (
    pk          bigserial PRIMARY KEY,
    app_name    text NOT NULL,
    task_id     text NOT NULL,
    owner       text NOT NULL,
    config_id   text NOT NULL,
    version     bigint NOT NULL,                         -- the task version whose event this is
    config      text NOT NULL,                         -- the push config (url, token), as registered
    body        text NOT NULL,                         -- the event (a StreamResponse, protobuf JSON)
    status      text NOT NULL,                         -- PENDING, SENT, DEAD
    attempts    bigint NOT NULL DEFAULT 0,
    next_attempt_at double precision NOT NULL,                     -- database clock
    last_error  text,
    created_at  double precision NOT NULL,
    sent_at     double precision,
    UNIQUE (task_id, owner, config_id, version)
);
CREATE INDEX a2a_push_due ON a2a_push_outbox (app_name, status, next_attempt_at);

INSERT INTO schema_version (version, name, applied_at)
VALUES (22, 'a2a', extract(epoch FROM clock_timestamp()));
-- Retention and forgetting a user (issue 43). A session chosen for purging is
-- marked first (purging_at, database clock), in one statement that checks
-- nothing still needs it; from then on an append to it finds it missing, so
-- its events can be deleted in short batches without a long lock. The
-- session row goes last, when nothing of it is left. The indexes below keep
-- every batch of the purge on an index; forget_requests is the audit of
-- forgetting a user, written before anything is deleted.

ALTER TABLE sessions ADD COLUMN purging_at double precision;

-- The sessions being purged, per app and user (a small set: marked a batch at a time).
CREATE INDEX sessions_purging ON sessions (app_name, user_id) WHERE purging_at IS NOT NULL;
-- The sagas of a session: the purge checks none is unfinished, then deletes them.
CREATE INDEX sagas_by_session ON sagas (app_name, user_id, session_id);
-- The oldest finished run kept, per app (a metric of the purge).
CREATE INDEX runs_finished ON runs (app_name, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE forget_requests (
    pk           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope        text NOT NULL,                     -- the app, or '*': every app
    user_id      text NOT NULL,
    actor        text NOT NULL,                     -- who asked
    reason       text,                              -- why
    status       text NOT NULL CHECK (status IN ('STARTED', 'DONE')),
    deleted      text NOT NULL DEFAULT '{}',        -- JSON: rows deleted per table so far
    created_at   double precision NOT NULL,         -- database clock
    finished_at  double precision
);

-- One request in progress per user and scope: a retry after a crash carries it on.
CREATE UNIQUE INDEX forget_requests_open ON forget_requests (scope, user_id)
    WHERE status = 'STARTED';

INSERT INTO schema_version (version, name, applied_at)
VALUES (23, 'retention', extract(epoch FROM clock_timestamp()));
-- The A2A rows in retention and in forgetting a user (issues 43 and 44). A
-- session's A2A tasks are found through the invocations they drove
-- (a2a_task_runs, by session); a task's events, push configs and outbox rows
-- through their keys (task first); the message ids a task took through the
-- index below. Each batch of the purge stays on an index.

-- The tasks of a session (the purge's and the forget's way to a session's tasks).
CREATE INDEX a2a_task_runs_by_session ON a2a_task_runs (app_name, user_id, session_id);
-- The message ids a task took (a2a_messages is keyed by the client's context and id).
CREATE INDEX a2a_messages_by_task ON a2a_messages (task_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (24, 'a2a_retention', extract(epoch FROM clock_timestamp()));

-- The database's histories as the workers saw them (issue 46). A PostgreSQL
-- primary's WAL timeline changes when a standby is promoted (or a backup is
-- restored to a point in time); each worker records the timeline it finds at
-- start and after an outage. A second row says a failover happened, and when:
-- with asynchronous replication, commits acknowledged just before it may be
-- lost (an intent, an answer), so for a while the journal asks the outside
-- service by key before it acts. SQLite has no timelines: the table stays empty.
CREATE TABLE db_timelines (
    timeline       text PRIMARY KEY,
    first_seen_at  double precision NOT NULL
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (25, 'timelines', extract(epoch FROM clock_timestamp()));
