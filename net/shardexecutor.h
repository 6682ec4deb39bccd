#pragma once

#include <core/disputequestion.h>
#include <core/hash.h>
#include <core/inference/question.h>
#include <core/shardresult.h>
#include <core/shardtask.h>
#include <core/stagetensors.h>

#include <QHash>
#include <QList>
#include <QString>

#include <cstdint>
#include <functional>
#include <mutex>

namespace tessera::net {

// What trains the shards a NodeClient receives (the compute thread, wired in app/). The client
// calls start() from its own thread and collects finished shards with takeFinished(); an
// executor that finishes work on another thread says so with notify(tag), which wakes the
// client's loop at once (it does not poll for it).
class ShardExecutor {
public:
    struct Finished {
        QString tag; // the client that started it
        QString assignment;
        core::ShardResult result;
        QByteArray weights; // empty when the shard failed
        QByteArray keptState; // the training state at task.keptStateCheckpoint(), for disputes
        core::Digest keptStateDigest; // its SHA-256 when the executor computed it (null: not yet)
        // Or (keptState empty) the file the executor wrote it to in the client's staging folder
        // (stageIn()), which the client's blob cache takes in by renaming it.
        QString keptStateFile;
    };
    // What a dispute asked for, made (recreate()): a training state, a trace or operands; or why
    // not (error non-empty).
    struct Recreated {
        QString tag;
        QString key;
        QByteArray state;
        core::Digest digest; // of state
        QString error;
    };

    virtual ~ShardExecutor() = default;
    // startWeights: the round's weights; or, when it is empty, startWeightsFile holds them (a stage
    // task reads only its share of them, and the client keeps the file until the result is sent).
    // blobPaths: where the task's model and data blobs are on disk, by sha256. deadlineMs: the
    // assignment's deadline from now (TASK's deadlineMs; 0: none), which bounds how long the job
    // owner's code may compute (a sandboxed worker is stopped some time after it).
    virtual void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& startWeights,
        const QString& startWeightsFile, const QHash<core::Digest, QString>& blobPaths, std::int64_t deadlineMs)
        = 0;
    virtual QList<Finished> takeFinished(const QString& tag) = 0; // thread-safe
    // Where the shards a client `tag` starts may leave their kept training state as a file, written
    // off the client's thread (a 40 M-parameter AdamW state is about 480 MB: writing it on the
    // network loop stalled its heartbeats). An executor that ignores it hands the bytes back.
    virtual void stageIn(const QString& tag, const QString& directory) { (void)tag, (void)directory; }
    // Answers a dispute's question about a shard this node trained, off the caller's thread: the
    // training state at a checkpoint (1..n-1), or a portable job's trace or operands, re-trained
    // from the round's weights (startWeightsPath) and the kept state (empty: none);
    // takeRecreated() collects the bytes under `key`. False: this executor cannot (the dispute is
    // answered with "none").
    virtual bool recreate(const QString& tag, const QString& key, const core::ShardTask& task,
        const core::DisputeQuestion& question, const QString& startWeightsPath, const QString& keptStatePath,
        const QHash<core::Digest, QString>& blobPaths)
    {
        (void)tag, (void)key, (void)task, (void)question, (void)startWeightsPath, (void)keptStatePath, (void)blobPaths;
        return false;
    }
    virtual QList<Recreated> takeRecreated(const QString& tag) // thread-safe
    {
        (void)tag;
        return {};
    }
    // The round's weights rebuilt from the previous round's and the round's change (rebuild()),
    // with the SHA-256 of weights, or why not (error non-empty).
    struct Rebuilt {
        QString tag;
        QString key;
        QByteArray weights;
        core::Digest digest;
        QString error;
    };
    // Whether rebuild() works: false, and the node downloads every round's weights whole.
    virtual bool rebuildsWeights() const { return false; }
    // Rebuilds a round's weights from the previous round's (a file) and the round's int8 change (a
    // file) off the caller's thread; takeRebuilt() collects them under `key`.
    virtual void rebuild(const QString& tag, const QString& key, const QString& previousPath, const QString& changePath)
    {
        (void)tag, (void)key, (void)previousPath, (void)changePath;
    }
    virtual QList<Rebuilt> takeRebuilt(const QString& tag) // thread-safe
    {
        (void)tag;
        return {};
    }
    // Serving (docs/PROTOCOL.md, "Serving"): a served model's replica, loaded once and asked
    // questions one at a time, off the caller's thread. What comes of it (the replica loaded or
    // not, an answer's tokens as they are made, its line or why none) is collected with
    // takeServed(). canHost(): whether this executor can (the node declares capability "serve").
    struct Served {
        enum class Kind { Hosted, Tokens, Answered };
        Kind kind = Kind::Hosted;
        QString tag;
        QString assignment;
        QString ticket; // Tokens, Answered
        std::int64_t from = 0; // Tokens: the index of the first
        QList<std::int64_t> tokens;
        QByteArray line; // Answered
        QString error; // Hosted, Answered: why not (empty: loaded, answered)
    };
    virtual bool canHost() const { return false; }
    // weightsPath: the model's weights blob (canonical hash replica.startWeights).
    virtual void host(const QString& tag, const QString& assignment, const core::ShardTask& replica, const QString& weightsPath)
    {
        (void)tag, (void)assignment, (void)replica, (void)weightsPath;
    }
    virtual void ask(
        const QString& tag, const QString& assignment, const QString& ticket, const core::inference::Question& question)
    {
        (void)tag, (void)assignment, (void)ticket, (void)question;
    }
    // Stops hosting without waiting (a question being answered ends at its next token);
    // `assignment` empty: every replica of the tag.
    virtual void unhost(const QString& tag, const QString& assignment) { (void)tag, (void)assignment; }
    virtual QList<Served> takeServed(const QString& tag) // thread-safe
    {
        (void)tag;
        return {};
    }
    virtual bool idle() const = 0; // thread-safe

    // Stage tasks of pipeline jobs (docs/PROTOCOL.md, "Stage tasks"). runsStages(): start() runs
    // them (the node declares capability "pipeline"). A running stage's tensors for the others
    // are collected with takeTensors() (its client relays them as TENSOR; notify() says there are
    // some); what arrives for it is handed in whole with deliverTensor(); stopStage() ends a stage
    // whose pipeline ended (it finishes as a returned result, which the client need not send).
    struct Tensor {
        QString tag;
        QString assignment;
        std::int64_t peer = 0; // the stage it goes to (takeTensors) or comes from (deliverTensor)
        core::TensorKind kind = core::TensorKind::Activation;
        std::int64_t step = 0;
        std::int64_t micro = 0;
        QByteArray bytes;
    };
    virtual bool runsStages() const { return false; }
    virtual QList<Tensor> takeTensors(const QString& tag) // thread-safe
    {
        (void)tag;
        return {};
    }
    virtual void deliverTensor(const Tensor& tensor) { (void)tensor; }
    virtual void stopStage(const QString& assignment, const QString& reason) { (void)assignment, (void)reason; }

    // The client `tag` (`owner`) sets what wakes it, and clears it as it goes (an empty
    // function; only its own: a second client of the tag keeps its own); thread-safe. Once it
    // returns, the previous function is not running and is not called again. An executor
    // outlives the clients it serves.
    void setNotifier(const QString& tag, const void* owner, std::function<void()> wake);

protected:
    // Something for client `tag` is ready to take: a finished shard, a recreated state, a rebuilt
    // round. From any thread.
    void notify(const QString& tag) const;
    // Moves the entries of one client (by tag) out of a list (of Finished, Tensor, ...); the
    // caller holds the list's lock.
    template<typename T> static QList<T> takeTagged(QList<T>& list, const QString& tag)
    {
        QList<T> mine;
        for (auto it = list.begin(); it != list.end();) {
            if (it->tag == tag) {
                mine.append(std::move(*it));
                it = list.erase(it);
            } else {
                ++it;
            }
        }
        return mine;
    }

private:
    mutable std::mutex m_notifierMutex;
    struct Notifier {
        const void* owner = nullptr;
        std::function<void()> wake;
    };
    QHash<QString, Notifier> m_notifiers;
};

} // namespace tessera::net
