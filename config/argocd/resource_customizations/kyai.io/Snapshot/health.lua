-- Argo CD health of a kyai.io Snapshot (KYAI Operator).
-- Progressing while Pending or Resolving; Healthy when Ready; Degraded when Failed.
-- A Stalled=True condition (kstatus) is Degraded whatever the phase.
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
  hs.message = "Waiting for the operator to reconcile the Snapshot"
  return hs
end

local status = obj.status
local phase = status.phase
local stalled = condition(status.conditions, "Stalled")
if phase == "Failed" or (stalled ~= nil and stalled.status == "True") then
  hs.status = "Degraded"
  if stalled ~= nil and stalled.status == "True" and stalled.message ~= nil and stalled.message ~= "" then
    hs.message = stalled.message
  else
    hs.message = status.message or phase
  end
  return hs
end
if phase == "Ready" then
  local generation = obj.metadata and obj.metadata.generation
  if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
    hs.status = "Progressing"
    hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
    return hs
  end
  hs.status = "Healthy"
  hs.message = status.message or phase
  return hs
end
hs.status = "Progressing"
hs.message = phase .. ": " .. (status.message or "")
return hs
