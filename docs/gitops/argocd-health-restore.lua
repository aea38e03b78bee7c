-- Argo CD health for statusvault.dev/Restore, from its kstatus conditions. In argocd-cm:
--   resource.customizations.health.statusvault.dev_Restore: |
--     <this file>
-- The first rule whose condition is on the object (for its current generation) decides.
local rules = {
  {type = "Stalled", status = "True", health = "Degraded"},
  {type = "Ready", status = "True", health = "Healthy"},
  {type = "Reconciling", status = "True", health = "Progressing"},
  {type = "Ready", status = "False", health = "Progressing"},
}
local hs = {status = "Progressing", message = "waiting for the statusvault controller"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "the controller has not seen this generation yet"
  return hs
end
for _, rule in ipairs(rules) do
  for _, c in ipairs(obj.status.conditions) do
    if c.type == rule.type and c.status == rule.status then
      hs.status = rule.health
      hs.message = (c.reason or "") .. ": " .. (c.message or "")
      return hs
    end
  end
end
return hs
