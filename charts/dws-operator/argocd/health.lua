-- Argo CD health check for dws-operator.dev/TrainingRequest. Put it in argocd-cm as
--   resource.customizations.health.dws-operator.dev_TrainingRequest: |
--     <this file>
-- Healthy: the training succeeded. Degraded: it failed (Stalled=True says why).
-- Suspended: its workload waits for capacity (Kueue and DWS hold it until nodes come).
-- Progressing: everything else: the operator has not seen the latest spec yet, the
-- node pool is being made, the work runs, or the request is being deleted.
local hs = {}
if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for dws-operator to take the request in"
  return hs
end
local status = obj.status
if obj.metadata ~= nil and obj.metadata.generation ~= nil and status.observedGeneration ~= nil
    and status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for dws-operator to see the latest spec"
  return hs
end
local phase = status.phase
local message = phase
if status.message ~= nil and status.message ~= "" then
  message = status.message
end
if phase == "Succeeded" then
  hs.status = "Healthy"
elseif phase == "Failed" then
  hs.status = "Degraded"
elseif phase == "WaitingForCapacity" then
  hs.status = "Suspended"
else
  hs.status = "Progressing"
end
hs.message = message
return hs
