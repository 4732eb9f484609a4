import HeraldStore

/// The driving task's items on a shared store (PostgreSQL), each with its lease checked just
/// before the group waits for its permits and is sent: another instance may have taken a lease (this one's heartbeat was
/// late and its leases were released, or one ran out), and an item whose lease is not this
/// claimant's any more, or that has an outcome, must not be sent. One read
/// (``HeraldStore/PushStore/leasedItems(tenant:job:indexes:claimant:)``) checks the item the
/// feed gave and the ones ready behind it, up to ``group``; the task that holds it is the only
/// one that sends the job's items, so the check is grouped here rather than in ``WireMarks``
/// (which groups the checks of concurrent send tasks).
struct LeaseCheckedItems {
    enum Lease {
        case ours
        /// It has an outcome, or its lease is another claimant's: not to be sent.
        case notOurs
        /// The check failed: not to be sent now (the job pauses).
        case unreadable(any Error)
    }

    /// Items checked in one read, at most: four sends for each of the tenant's permits, from 16
    /// to 256. The read costs the store about as much for a few hundred items as for a few
    /// dozen; the last item of a group is sent about four round trips to APNs after it, so a
    /// lease taken over meanwhile (its instance taken for dead) is seen that soon.
    let group: Int

    init(permits: Int) {
        group = permits >= 64 ? 256 : max(16, permits * 4)
    }

    /// The checked items, each moved out as it is taken (an item is copied nowhere on its way
    /// through: a copy retains every string and array it holds).
    private var items: [JobItem?] = []
    private var leases: [Lease] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }

    mutating func removeFirst() -> (JobItem, Lease)? {
        while head < items.count {
            defer { head += 1 }
            if let item = items[head].take() { return (item, leases[head]) }
        }
        return nil
    }

    /// Checks `first` and the items `feed` has ready behind it (taken from the feed: each is
    /// handed back by whoever sends it or gives it up).
    mutating func check(_ first: consuming JobItem, from feed: JobFeed, of job: Job, store: any PushStore, claimant: String) async {
        items.removeAll(keepingCapacity: true)
        leases.removeAll(keepingCapacity: true)
        head = 0
        items.append(first)
        while items.count < group, let item = feed.nextIfReady() { items.append(item) }
        let indexes = items.map { $0?.index ?? 0 }
        do {
            let ours = try await store.leasedItems(tenant: job.tenant, job: job.id, indexes: indexes, claimant: claimant)
            leases = indexes.map { ours.contains($0) ? .ours : .notOurs }
        } catch {
            leases = Array(repeating: .unreadable(error), count: indexes.count)
        }
    }
}
