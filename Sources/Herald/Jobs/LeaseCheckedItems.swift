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

    private var items: [(JobItem, Lease)] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }

    mutating func removeFirst() -> (JobItem, Lease)? {
        guard head < items.count else { return nil }
        defer { head += 1 }
        return items[head]
    }

    /// Checks `first` and the items `feed` has ready behind it (taken from the feed: each is
    /// handed back by whoever sends it or gives it up).
    mutating func check(_ first: JobItem, from feed: JobFeed, of job: Job, store: any PushStore, claimant: String) async {
        var taken = [first]
        while taken.count < group, let item = feed.nextIfReady() { taken.append(item) }
        let leased: Result<Set<Int>, any Error>
        do {
            leased = .success(try await store.leasedItems(tenant: job.tenant, job: job.id, indexes: taken.map(\.index), claimant: claimant))
        } catch {
            leased = .failure(error)
        }
        items.removeAll(keepingCapacity: true)
        head = 0
        for item in taken {
            switch leased {
            case .success(let ours): items.append((item, ours.contains(item.index) ? .ours : .notOurs))
            case .failure(let error): items.append((item, .unreadable(error)))
            }
        }
    }
}
