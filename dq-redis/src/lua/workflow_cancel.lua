-- workflow_cancel: cancels a workflow as a whole (lib.lua's workflows): its blocked steps are
-- cancelled, the jobs of its steps that wait (delayed or ready) deleted, its running ones asked
-- to stop (as cancel.lua asks: `cancels`, and `cancel <topic:id>` on `wake`), and no step is
-- released after this.
-- KEYS[1] workflow:<id>  KEYS[2] workflows  KEYS[3] jobs  KEYS[4] delayed  KEYS[5] counts
-- KEYS[6] cancels  KEYS[7] leases (declared; lib.lua names them from the prefix)
-- ARGV[1] key prefix  ARGV[2] workflow id
-- Returns -1 when there is no such workflow, else how many steps this cancelled or asked to
-- stop (0 for one that ended: it is left as it is).
local plan = workflow_new_plan(ARGV[1])
local f = workflow_open(plan, ARGV[2])
if not f then return -1 end
-- An ended workflow is left as it ended (and its record expires as it would have).
if f.left <= 0 then return 0 end
local n = workflow_cancel_all(plan, f)
workflow_touch(plan)
local now = now_us()
workflow_write(plan, now)
workflow_finish(plan, now)
return n
