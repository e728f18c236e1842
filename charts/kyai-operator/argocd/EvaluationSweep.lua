-- Argo CD health of a kyai.io EvaluationSweep (KYAI Operator).
-- Progressing while cells are pending or running (message: the cell counts, or what it waits for);
-- Healthy when Succeeded (message: the best Workloads); Degraded as soon as a cell failed (the
-- sweep can no longer end Succeeded) and when Stalled=True (an invalid spec, or an object it
-- names missing for longer than the grace period).
-- A Succeeded status older than the spec (observedGeneration < generation) is Progressing.
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
local function count(value)
  if value == nil then
    return 0
  end
  return value
end

if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to expand the sweep"
  return hs
end

local status = obj.status
local phase = status.phase
local cells = status.cells or {}
local failed = count(cells.failed)

if phase == "Failed" or failed > 0 then
  hs.status = "Degraded"
  hs.message = tostring(failed) .. " of " .. tostring(count(cells.total)) .. " cells failed"
  if count(cells.running) > 0 then
    hs.message = hs.message .. " (" .. tostring(cells.running) .. " still running)"
  end
  return hs
end

local stalled = condition(status.conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  if stalled.message ~= nil and stalled.message ~= "" then
    hs.message = stalled.message
  else
    hs.message = status.message or phase
  end
  return hs
end

if phase == "Succeeded" then
  local generation = obj.metadata and obj.metadata.generation
  if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
    hs.status = "Progressing"
    hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
    return hs
  end
  hs.status = "Healthy"
  hs.message = status.message or "Succeeded"
  return hs
end

hs.status = "Progressing"
hs.message = phase .. ": " .. (status.message or "")
return hs
