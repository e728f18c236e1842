-- Argo CD health of a kyai.io EvaluationSchedule (KYAI Operator).
-- Degraded while its newest finished run is shown worse than its baseline (Regressed=True:
-- the message gives the difference, its interval, p and both runs) and when Stalled=True (a
-- schedule or time zone that cannot be read); Progressing until the operator has reconciled
-- it, while its status is older than its spec, and while Reconciling=True (kstatus); Healthy
-- otherwise: not regressed, not comparable, no run yet, suspended, or a run going on (as a
-- CronJob is while its Job runs). A regression stays Degraded while the next run runs.
local hs = {}
local function condition(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile the schedule"
  return hs
end

local status = obj.status
local phase = status.phase
local conditions = status.conditions

local regressed = condition(conditions, "Regressed")
if regressed ~= nil and regressed.status == "True" then
  hs.status = "Degraded"
  hs.message = "Regressed: " .. (regressed.message or status.message or "")
  return hs
end

local stalled = condition(conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  if stalled.message ~= nil and stalled.message ~= "" then
    hs.message = stalled.message
  else
    hs.message = status.message or phase
  end
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local reconciling = condition(conditions, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  if reconciling.message ~= nil and reconciling.message ~= "" then
    hs.message = reconciling.message
  else
    hs.message = status.message or phase
  end
  return hs
end

hs.status = "Healthy"
hs.message = status.message or phase
return hs
