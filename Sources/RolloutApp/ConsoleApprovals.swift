import Console
import Platform
import Rollout
import StepUp

/// Who approved which change, read from the audit records the write path keeps: each accepted step-up record
/// (a security key's approval with its document, a phone's outcome, a one-time code, a plan's pre-approval) is
/// written in the same transaction as the `published` record that follows it.
enum ApprovalTrail {
    /// The approval an accepted step-up record stands for; nil for other records, and for the first half of a
    /// two-person request (recorded, not yet an approval of anything published).
    static func approval(_ entry: Rollout.AuditEntry) -> ChangeApproval? {
        guard entry.result == .stepUpAccepted else { return nil }
        if let recorded = RecordedApproval(actor: entry.actor, auditDetail: entry.detail) {
            if recorded.request != nil, !recorded.isCoApproval { return nil }
            let proposer = recorded.document.operatorID
            return ChangeApproval(approver: entry.actor, method: .securityKey, proposer: proposer == entry.actor ? nil : proposer)
        }
        let fields = Set(entry.detail.split(separator: ";").map { $0.trimmingSpaces() })
        if fields.contains("method phone") { return ChangeApproval(approver: entry.actor, method: .phone) }
        if fields.contains("result pre-approved") { return ChangeApproval(approver: entry.actor, method: .preApproved) }
        return ChangeApproval(approver: entry.actor, method: .code)
    }

    /// The approvals of each published version among `records` (any order): the accepted step-up records that
    /// immediately precede its `published` record.
    static func byVersion(_ records: [AuditRecord]) -> [Int: [ChangeApproval]] {
        var out: [Int: [ChangeApproval]] = [:]
        var pending: [ChangeApproval] = []
        for record in records.sorted(by: { $0.sequence < $1.sequence }) {
            if record.entry.result == .stepUpAccepted {
                if let a = approval(record.entry) { pending.append(a) }
                continue
            }
            if record.entry.result == .published, let version = record.entry.version, !pending.isEmpty {
                out[version] = pending
            }
            pending = []
        }
        return out
    }
}

extension StepUpMethods {
    /// Who approved each published version with a second factor, from every audit record of `session`'s store
    /// (`rollout history` shows it, as the console's history does).
    public static func approvalsByVersion(_ session: RolloutSession) throws -> [Int: [ChangeApproval]] {
        var records: [AuditRecord] = []
        var before: Int64? = nil
        while true {
            let page = try session.templates.auditRecords(limit: 1000, before: before)
            records += page
            guard let last = page.last, page.count == 1000 else { break }
            before = last.sequence
        }
        return ApprovalTrail.byVersion(records)
    }

    /// `approved by bob (security key), proposed by ana` for an audit record: a published record's approvals
    /// (given by version) or an accepted step-up record's own; empty otherwise.
    public static func approvalText(_ record: AuditRecord, byVersion: [Int: [ChangeApproval]]) -> String {
        let e = record.entry
        if e.result == .published, let v = e.version { return ChangeApproval.text(byVersion[v] ?? [], actor: e.actor) }
        return ApprovalTrail.approval(e).map { ChangeApproval.text([$0], actor: e.actor) } ?? ""
    }
}
