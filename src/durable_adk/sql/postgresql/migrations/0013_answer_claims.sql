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
