-- Argo CD health of a kyai.io EvaluationRun (KYAI Operator).
-- Progressing while Pending (message: what it waits for) or Generating/Judging (progress);
-- Healthy when Succeeded; Degraded when Succeeded with Passed=False (score and threshold)
-- or when Failed (the message of its Ready/Stalled condition).
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
  hs.message = "Waiting for the operator to accept the run"
  return hs
end

local status = obj.status
local phase = status.phase
local conditions = status.conditions

if phase == "Succeeded" then
  local passed = condition(conditions, "Passed")
  if passed ~= nil and passed.status == "False" then
    hs.status = "Degraded"
    hs.message = "Thresholds missed: " .. (passed.message or "")
    return hs
  end
  hs.status = "Healthy"
  hs.message = status.message or "Succeeded"
  return hs
end

if phase == "Failed" then
  hs.status = "Degraded"
  local failed = condition(conditions, "Stalled") or condition(conditions, "Ready")
  if failed ~= nil and failed.message ~= nil and failed.message ~= "" then
    hs.message = failed.message
  else
    hs.message = status.message or "Failed"
  end
  return hs
end

local stalled = condition(conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message or status.message or phase
  return hs
end

hs.status = "Progressing"
local progress = status.progress
local progressing = condition(conditions, "Progressing")
local ready = condition(conditions, "Ready")
if (phase == "Generating" or phase == "Judging") and progressing ~= nil
    and progressing.status == "False" and ready ~= nil
    and ready.message ~= nil and ready.message ~= "" then
  -- Held in its phase with its own work done (e.g. waiting for a baseline run): say why.
  hs.message = phase .. " (held): " .. ready.message
elseif (phase == "Generating" or phase == "Judging") and progress ~= nil
    and progress.done ~= nil and progress.total ~= nil then
  hs.message = phase .. ": " .. tostring(progress.done) .. "/" .. tostring(progress.total)
  if progress.errors ~= nil and progress.errors > 0 then
    hs.message = hs.message .. " (" .. tostring(progress.errors) .. " errors)"
  end
else
  hs.message = phase .. ": " .. (status.message or "")
end
return hs
