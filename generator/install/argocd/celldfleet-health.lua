-- Argo CD health check for fleet.celld.dev/CelldFleet, written by celld-gen install.
-- The healer reports everything in the fleet's status; this only reads it. A status the
-- healer wrote for an older spec says nothing about the current one: Progressing.
local hs = {}
local function condition(conds, t)
  if conds == nil then return nil end
  for _, c in ipairs(conds) do
    if c.type == t then return c end
  end
  return nil
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "The fleet is being deleted: members drain, then their disks are removed"
  return hs
end
if obj.spec ~= nil and obj.spec.maintenance ~= nil and obj.spec.maintenance.paused == true then
  hs.status = "Suspended"
  hs.message = "Paused: the healer takes no lifecycle action (spec.maintenance.paused)"
  return hs
end
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the healer to report on this fleet"
  return hs
end
if obj.metadata.generation ~= nil and (obj.status.observedGeneration == nil or obj.status.observedGeneration < obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the healer to observe the latest spec"
  return hs
end
local conds = obj.status.conditions
local blocked = condition(conds, "Blocked")
if blocked ~= nil and blocked.status == "True" then
  hs.status = "Degraded"
  hs.message = blocked.reason .. ": " .. blocked.message
  return hs
end
local ready = condition(conds, "Ready")
local progressing = condition(conds, "Progressing")
if ready ~= nil and ready.status == "True" and (progressing == nil or progressing.status ~= "True") then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
hs.status = "Progressing"
if progressing ~= nil and progressing.message ~= nil then
  hs.message = progressing.message
elseif ready ~= nil and ready.message ~= nil then
  hs.message = ready.message
else
  hs.message = "Waiting for members to become ready"
end
return hs
