-- forget_done: deletes up to 1000 of the kept records of a topic that keeps none any more (its
-- retention was taken away), and its marks of cancelled jobs once the records are gone. One
-- step per page: a record's envelope lives in `jobs`, where a push of the same id writes the new
-- job's, so the page is read and deleted in the same step (a push between a read and a delete
-- would lose its job).
-- KEYS[1] jobs  KEYS[2] done:<topic>  KEYS[3] results  KEYS[4] cancelled:<topic>
-- Returns the number of records deleted (0: none left).
local jobs, done, results = KEYS[1], KEYS[2], KEYS[3]
local page = redis.call('ZRANGE', done, 0, 999)
redis.call('EXISTS', jobs, results, KEYS[4]) -- touched before the first write
if #page == 0 then
  redis.call('DEL', KEYS[4])
  return 0
end
redis.call('ZREM', done, unpack(page))
redis.call('HDEL', results, unpack(page))
redis.call('HDEL', jobs, unpack(page))
return #page
