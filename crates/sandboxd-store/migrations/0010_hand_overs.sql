-- Each agent's last hand-over of a task (i_am_done, i_documented, pass_review, fail_review,
-- unclaim), written in the transaction that moves the task: a retry whose first answer a crash
-- lost is recognised as a repeat even when the call's audit row was never written.
CREATE TABLE hand_overs (
    agent TEXT PRIMARY KEY REFERENCES agents (slug) ON DELETE CASCADE,
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    verb TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
