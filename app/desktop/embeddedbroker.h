#pragma once

#include <compute/common/environment.h>
#include <core/error.h>

#include <QString>

#include <functional>
#include <memory>

class QProcess;
class QTemporaryDir;

namespace tessera::app {

// A broker for a user with no network configured (the practice network): tessera-broker as a child
// process of the app, on a Unix socket (ipc://) in a folder of the user's alone (0700, in the
// runtime folder), with a faucet so that the local wallet has credits: no other account on the
// machine reaches it. The app talks to it over ZeroMQ like to any broker. A process of its own, not a thread:
// the broker's arithmetic (aggregation, evaluation, replays) needs LibTorch, and the app does not
// load it. It dies with the app (PR_SET_PDEATHSIG) and is stopped with SIGTERM when the app quits
// or joins a network.
class EmbeddedBroker {
public:
    struct Options {
        QString dataDirectory;
        compute::ComputeEnvironment environment;
        bool faucet = true;
        int canaryPercent = 0;
        int selfVerifyAfterSeconds = 2; // alone, the broker re-executes the samples itself
        int disputeTimeoutSeconds = 30;
        int heartbeatMs = 1000;
        QString program; // empty: defaultBrokerProgram()
    };

    EmbeddedBroker();
    ~EmbeddedBroker();
    EmbeddedBroker(const EmbeddedBroker&) = delete;
    EmbeddedBroker& operator=(const EmbeddedBroker&) = delete;

    // Starts it and returns its address (ipc:///RUNTIME/tessera-practice-XXXXXX/broker.sock) at once: the broker listens within
    // a second or two (LibTorch's start), and ZeroMQ connects when it does. An error: the program
    // is missing, or its settings cannot be written.
    core::Result<QString> start(Options options);
    void stop();
    QString address() const { return m_address; }
    bool running() const;
    // Why a broker that ended by itself ended (empty while it runs or after stop()).
    QString endedWhy() const;
    // Called (on the thread that started it, from its event loop) when the broker ends by itself.
    void setOnEnded(std::function<void(const QString& why)> onEnded) { m_onEnded = std::move(onEnded); }

    // TESSERA_BROKER_PROGRAM when set (tests that embed the app outside the build's app folder),
    // else tessera-broker beside the running program, else the installed one.
    static QString defaultBrokerProgram();

private:
    std::unique_ptr<QProcess> m_process;
    std::unique_ptr<QTemporaryDir> m_socketFolder;
    QString m_address;
    std::function<void(const QString&)> m_onEnded;
    bool m_stopping = false;
};

} // namespace tessera::app
